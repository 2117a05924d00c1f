"""Fine-tuning DataModules: real GLUE/CoNLL files through a checkpoint-style tokenizer, the hub path on
saved datasets, word-level views for NER scoring, and errors for missing splits. Datamodules and GLUE readers'
specifications come from the task configs, as a run builds them (task_config, glue_task, task_datamodule)."""

import datasets
import pytest
import torch
from hydra.errors import MissingConfigException
from tokenizers import Tokenizer, models

from armlm.common.vocabulary import IGNORE_INDEX
from armlm.datamodules.conll import CONLL2003_TAGS, read_conll
from armlm.datamodules.finetune import FinetuneDataModule, LengthGroupedBatches
from armlm.datamodules.glue import read_release_split
from armlm.training.setup import build
from tests.helpers.configs import glue_task, task_config
from tests.helpers.lanes import fast_lane_keeps
from tests.helpers.vocabularies import word_tokenizer_json


def task_datamodule(name: str, tokenizer_json: str, *overrides: str, **settings) -> FinetuneDataModule:
    """The task's datamodule from its config, with `settings` (task.data.* values) replacing the config's."""
    return build(task_config(name, *overrides).task.data, tokenizer_json=tokenizer_json, adjusted=settings)


@pytest.fixture(scope="module")
def tokenizer_json() -> str:
    return word_tokenizer_json("the a of to and in is was it that - said . , eu rejects german call".split())


def test_glue_pairs_encode_with_segments_and_limits(data_dir, tokenizer_json):
    dm = task_datamodule("rte", tokenizer_json, source=str(data_dir / "glue"), max_length=32,
                         max_train_examples=50, max_eval_examples=20)
    dm.setup()
    assert dm.info.kind == "classification" and dm.info.eval_splits == ("dev",)
    assert len(dm.encoded["train"]) == 50 and len(dm.encoded["dev"]) == 20
    batch = next(iter(dm.train_dataloader()))
    assert batch["input_ids"].shape[1] <= 32 and (batch["input_ids"][:, 0] == 2).all()  # [CLS] first
    first = dm.encoded["train"][0]
    assert first.input_ids.count(3) == 2 and first.token_type_ids[-1] == 1  # [SEP] A [SEP] B [SEP]
    gold = [e.label for e in read_release_split(glue_task("rte"), data_dir / "glue", "train")[:50]]
    assert [e.labels for e in dm.encoded["train"]] == gold
    assert dm.majority_label() in (0, 1)


def test_glue_hub_path_gives_the_same_batches(tmp_path, data_dir, tokenizer_json):
    rows = read_release_split(glue_task("mrpc"), data_dir / "glue", "dev")[:30]
    table = {"sentence1": [r.text_a for r in rows], "sentence2": [r.text_b for r in rows],
             "label": [r.label for r in rows], "idx": list(range(30))}
    datasets.DatasetDict({"train": datasets.Dataset.from_dict(table),
                          "validation": datasets.Dataset.from_dict(table)}).save_to_disk(str(tmp_path / "hub"))
    release = tmp_path / "release" / "MRPC"
    release.mkdir(parents=True)
    src = (data_dir / "glue" / "MRPC" / "dev.tsv").read_text(encoding="utf-8-sig").splitlines()[:31]
    for split in ("train", "dev"):
        (release / f"{split}.tsv").write_text("\n".join(src) + "\n", encoding="utf-8")
    encoded = []
    for source in (tmp_path / "hub", tmp_path / "release"):
        dm = task_datamodule("mrpc", tokenizer_json, source=str(source), max_length=64)
        dm.setup()
        encoded.append(dm.encoded)
    assert encoded[0] == encoded[1]


def test_mnli_evaluates_both_dev_splits(tmp_path, tokenizer_json):
    folder = tmp_path / "MNLI"
    folder.mkdir()
    header = "index\tsentence1\tsentence2\tgold_label"
    for split, label in [("train", "neutral"), ("dev_matched", "entailment"), ("dev_mismatched", "contradiction")]:
        (folder / f"{split}.tsv").write_text(f"{header}\n0\tthe eu\tthe call\t{label}\n")
    dm = task_datamodule("mnli", tokenizer_json, source=str(tmp_path))
    dm.setup()
    assert dm.info.eval_splits == ("dev_matched", "dev_mismatched") and len(dm.val_dataloader()) == 2
    assert [dm.encoded[s][0].labels for s in ("train", "dev_matched", "dev_mismatched")] == [1, 0, 2]


def test_a_missing_split_names_the_file(tmp_path, tokenizer_json):
    (tmp_path / "RTE").mkdir()
    (tmp_path / "RTE" / "train.tsv").write_text("index\tsentence1\tsentence2\tlabel\n0\ta\tb\tentailment\n")
    dm = task_datamodule("rte", tokenizer_json, source=str(tmp_path))
    with pytest.raises(FileNotFoundError, match=r"RTE/dev\.tsv is missing"):
        dm.setup()


@pytest.mark.parametrize("subword", fast_lane_keeps(["first", "last"], keep=["first"]))
def test_conll_word_views_for_scoring(data_dir, tokenizer_json, subword):
    dm = task_datamodule("conll2003", tokenizer_json, source=str(data_dir / "conll2003"), max_length=8,
                         max_train_examples=40, max_eval_examples=40)
    dm.read_words_at(subword)
    dm.setup()
    with pytest.raises(RuntimeError, match="after setup"):
        dm.read_words_at({"first": "last", "last": "first"}[subword])
    sentences = read_conll(data_dir / "conll2003" / "eng.testa")[:40]
    batch = dm.collate(dm.encoded["validation"])
    for row, sentence in enumerate(sentences):
        gold = batch["word_labels"][row]
        assert gold[: len(sentence.words)].tolist() == [CONLL2003_TAGS.index(t) for t in sentence.tags]
        assert (gold[len(sentence.words):] == IGNORE_INDEX).all()
        positions = batch["word_positions"][row, : len(sentence.words)]
        kept = positions >= 0  # words whose first subword is past max_length=8 are cut (6 fit beside [CLS]/[SEP])
        first_six = dm.tokenizer.encode(list(sentence.words), is_pretokenized=True).word_ids[:6]
        assert kept.tolist() == [w in first_six for w in range(len(sentence.words))]
        token_labels = batch["labels"][row]
        assert token_labels[positions[kept]].tolist() == gold[: len(sentence.words)][kept].tolist()
        ids = [None, *first_six, None][: len(token_labels)]  # [CLS] subwords [SEP], as encoded
        for word in map(int, kept.nonzero().flatten()):  # each word read at its first or last kept subword
            at = [i for i, w in enumerate(ids) if w == word]
            assert int(positions[word]) == (at[0] if subword == "first" else at[-1])
    assert dm.majority_label() == CONLL2003_TAGS.index("O")


def test_conll_hub_path_matches_the_files(tmp_path, data_dir, tokenizer_json):
    sentences = read_conll(data_dir / "conll2003" / "eng.testb")[:25]
    features = datasets.Features({"tokens": datasets.Sequence(datasets.Value("string")),
                                  "ner_tags": datasets.Sequence(datasets.ClassLabel(names=list(CONLL2003_TAGS)))})
    table = {"tokens": [list(s.words) for s in sentences],
             "ner_tags": [[CONLL2003_TAGS.index(t) for t in s.tags] for s in sentences]}
    split = datasets.Dataset.from_dict(table, features=features)
    datasets.DatasetDict({"train": split, "validation": split}).save_to_disk(str(tmp_path / "hub"))
    # The same sentences in the column format (IOB2 tags stay as they are), under the other file naming.
    text = "-DOCSTART- -X- -X- O\n\n" + "\n\n".join(
        "\n".join(f"{w} NN I-NP {t}" for w, t in zip(s.words, s.tags)) for s in sentences) + "\n"
    for name in ("train.txt", "valid.txt"):
        (tmp_path / name).write_text(text)
    hub = task_datamodule("conll2003", tokenizer_json, source=str(tmp_path / "hub"))
    files = task_datamodule("conll2003", tokenizer_json, source=str(tmp_path))
    hub.setup()
    files.setup()
    assert hub.encoded == files.encoded and len(hub.encoded["train"]) == 25


def test_conll_errors_name_the_fix(tmp_path, tokenizer_json):
    with pytest.raises(ValueError, match="eval_splits"):
        task_datamodule("conll2003", tokenizer_json, source=str(tmp_path), eval_splits=["dev"])
    dm = task_datamodule("conll2003", tokenizer_json, source=str(tmp_path))
    with pytest.raises(FileNotFoundError, match="eng.train"):
        dm.setup()
    (tmp_path / "eng.train").write_text("EU NNP B-NP B-ORG\nrejects VBZ B-VP B-ACTION\n")
    with pytest.raises(ValueError, match=r"eng.train:2: tag 'B-ACTION' is not in the task's tag set"):
        dm.setup()


def test_a_tokenizer_without_armlm_specials_is_refused():
    plain = Tokenizer(models.WordLevel({"[UNK]": 0, "a": 1}, unk_token="[UNK]")).to_str()
    datamodule = task_datamodule("cola", plain, source="unused")  # a tokenizer of another model: its frame is set
    with pytest.raises(ValueError, match=r"lacks \[CLS\].*use_frame"):   # before setup, or nothing is encoded
        datamodule.setup("fit")


def test_unknown_glue_task_lists_the_tasks():
    with pytest.raises(MissingConfigException, match="(?s)Could not find 'task/sst3'.*Available options.*sst2"):
        task_config("sst3")


def test_length_grouped_batches_cover_every_example_once_with_little_padding():
    lengths = [int(x) for x in torch.randint(3, 60, (1000,), generator=torch.Generator().manual_seed(0))]
    def epochs_of(sampler: LengthGroupedBatches) -> list[list[list[int]]]:
        orders = []
        for epoch in range(2):
            sampler.sampler.set_epoch(epoch)  # as Lightning does at every epoch start
            orders.append(list(sampler))
        return orders

    sampler = LengthGroupedBatches(lengths, batch_size=16, seed=3, window=10)
    epochs = epochs_of(sampler)
    for batches in epochs:
        assert sorted(i for b in batches for i in b) == list(range(1000)) and len(batches) == len(sampler) == 63
        padded = sum(16 * max(lengths[i] for i in b) for b in batches)
        assert padded < 1.15 * sum(lengths)  # random batches of 16 pad to ~1.8x here
    assert epochs[0] != epochs[1]  # a new order every epoch, the same ones for the same seed
    assert epochs_of(LengthGroupedBatches(lengths, batch_size=16, seed=3, window=10)) == epochs
    # The order is a function of (seed, epoch) alone, so a run resumed at epoch 1 sees epoch 1's batches.
    resumed = LengthGroupedBatches(lengths, batch_size=16, seed=3, window=10)
    resumed.sampler.set_epoch(1)
    assert list(resumed) == epochs[1]
