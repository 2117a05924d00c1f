"""What the fine-tuning length cut costs CoNLL-2003 NER before any model is trained.

Fine-tuning cuts task.data.max_length to the positions pretraining trained (finetune.run.trained_max_length:
64 for the default 64-token blocks), and a word the cut drops is predicted 'O' (finetune.module.predictions).
Per split and max length this prints the sentences, the share cut, the gold entities, the share of them the cut
loses wholly or partly, and the entity F1 (seqeval, finetune.metrics) of a *perfect* tagger under that cut: the
ceiling every arm fine-tuned at that length shares. Encoding, the word view and the scoring are the fine-tuning
code's own (ConllDataModule.encode / collate, FinetuneModule.predictions, task_metrics).

    python bench/conll_truncation.py --pretrained outputs/mlm/<run>          # a run folder or checkpoint
    python bench/conll_truncation.py --tokenizer .cache/armlm/.../tokenizer/tokenizer.json --lengths 64 128 512
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch
import torch.nn.functional as F
from omegaconf import OmegaConf
from seqeval.metrics.sequence_labeling import get_entities

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # run as a script from anywhere

from armlm.common.config import data_dir  # noqa: E402
from armlm.datamodules.conll import CONLL2003_TAGS  # noqa: E402
from armlm.datamodules.finetune import ConllDataModule  # noqa: E402
from armlm.finetune.metrics import task_metrics  # noqa: E402
from armlm.finetune.module import FinetuneModule  # noqa: E402
from armlm.finetune.run import at_length_cap  # noqa: E402


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--pretrained", help="a pretraining checkpoint or run folder (its tokenizer_json is used)")
    which.add_argument("--tokenizer", help="a tokenizer.json (e.g. the token cache's <cache>/.../tokenizer/)")
    default_source = data_dir() / "conll2003"
    parser.add_argument("--source", default=str(default_source), help="task.data.source (default %(default)s)")
    parser.add_argument("--lengths", type=int, nargs="+", default=[64, 128],
                        help="max positions, [CLS]/[SEP] included (default: 64 128)")
    parser.add_argument("--splits", nargs="+", default=["validation", "test"],
                        help="splits to score; a missing one is skipped (default: validation test)")
    parser.add_argument("--json", help="also append the JSON line to this file")
    return parser.parse_args(argv)


def tokenizer_json_of(args: argparse.Namespace) -> tuple[str, str]:
    if args.tokenizer:
        return Path(args.tokenizer).read_text(encoding="utf-8"), str(args.tokenizer)
    from armlm.training.pretrained import load_pretrained  # reads the whole checkpoint: only when asked

    pretrained = load_pretrained(args.pretrained)
    return pretrained.tokenizer_json, f"{pretrained.path} (trained length {pretrained.trained_length})"


def conll_task() -> dict[str, Any]:
    """What configs/task/conll2003.yaml declares the task to be: name, kind, metrics, primary_metric."""
    declared = OmegaConf.to_container(OmegaConf.load(REPO / "configs" / "task" / "conll2003.yaml"))
    return {key: declared[key] for key in ("name", "kind", "metrics", "primary_metric")}


def split_row(datamodule: ConllDataModule, split: str) -> dict[str, Any]:
    """One split at the datamodule's max_length, encoded and scored as fine-tuning does."""
    sentences = datamodule.read_split(split)
    examples = [datamodule.encode(s) for s in sentences]
    datamodule.encoded = {split: examples}
    batch = datamodule.collate(examples)
    # The perfect tagger: its token logits put all weight on the gold label (IGNORE_INDEX positions are never
    # read back); FinetuneModule.predictions maps them to words and predicts 'O' for words the cut dropped.
    labels = batch["labels"]
    outputs = F.one_hot(labels.clamp(min=0), len(CONLL2003_TAGS)).float()
    owner = SimpleNamespace(info=datamodule.info)
    predicted, gold = FinetuneModule.predictions(owner, outputs, batch)
    metrics = task_metrics(datamodule.info)
    metrics.update(predicted, gold)
    scores = {k: float(v) for k, v in metrics.compute().items()}

    positions = batch["word_positions"]
    cut_sentences = entities = lost = 0
    for row, sentence in enumerate(sentences):
        dropped = [w for w in range(len(sentence.words)) if positions[row, w] < 0]
        cut_sentences += bool(dropped)
        first_dropped = dropped[0] if dropped else len(sentence.words)  # the cut drops a suffix of words
        spans = get_entities(list(sentence.tags))
        entities += len(spans)
        lost += sum(end >= first_dropped for _, _, end in spans)
    return {"split": split, "max_length": datamodule.max_length, "sentences": len(sentences),
            "cut_share": cut_sentences / len(sentences), "at_cap_share": at_length_cap(datamodule)[split],
            "entities": entities, "entities_lost_share": lost / max(1, entities),
            "perfect_f1": scores["entities/f1"] if "entities/f1" in scores else scores["f1"],
            "perfect_recall": scores.get("entities/recall", scores.get("recall"))}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    torch.set_num_threads(1)
    tokenizer_json, origin = tokenizer_json_of(args)
    rows = []
    for split in args.splits:
        for length in args.lengths:
            datamodule = ConllDataModule(args.source, **conll_task(), eval_splits=(split,),
                                         tokenizer_json=tokenizer_json, max_length=length)
            try:
                rows.append(split_row(datamodule, split))
            except FileNotFoundError as err:
                print(f"skipping {split}: {err}", file=sys.stderr)
                break
    print(f"CoNLL-2003 ({args.source}) encoded with the tokenizer of {origin}; 'cut': at least one word dropped "
          "(at cap: the encoding fills max_length, finetune.run.at_length_cap); perfect F1: a gold tagger whose "
          "dropped words are 'O'\n")
    print("| split | max positions | sentences | cut | at cap | entities | entities lost (wholly or partly) "
          "| perfect-tagger F1 | perfect-tagger recall |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['split']} | {r['max_length']} | {r['sentences']:,} | {r['cut_share']:.2%} | "
              f"{r['at_cap_share']:.2%} | {r['entities']:,} | {r['entities_lost_share']:.2%} | "
              f"{r['perfect_f1']:.4f} | {r['perfect_recall']:.4f} |")
    result = {"tokenizer": origin, "source": args.source, "rows": rows}
    line = json.dumps(result)
    print(line)
    if args.json:
        with open(args.json, "a", encoding="utf-8") as f:
            f.write(line + "\n")
    return result


if __name__ == "__main__":
    main()
