"""The model card (README.md) of an exported folder: what was trained, on what, for how long, how well, with which
armlm commit, and how close the export's outputs are to armlm's."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from armlm.common.babylm import milestone_name, milestone_words
from armlm.interchange.parity import PARITY_TOLERANCE, ParityReport
from armlm.interchange.source import ExportSource


def run_record(checkpoint: Path) -> dict[str, Any]:
    """The run folder's config (.hydra/config.yaml) and summary (summary.json or results.json), where present;
    `checkpoint` may also be the run folder itself."""
    if checkpoint.is_dir():
        run = checkpoint
    else:
        run = checkpoint.parent.parent if checkpoint.parent.name == "checkpoints" else checkpoint.parent
    record: dict[str, Any] = {}
    config = run / ".hydra" / "config.yaml"
    if config.is_file():
        record["config"] = OmegaConf.to_container(OmegaConf.load(config), resolve=False)
    for name in ("summary.json", "results.json"):
        if (run / name).is_file():
            record["summary"] = json.loads((run / name).read_text())
    return record


def model_card(source: ExportSource, target: str, native: bool, parity: ParityReport, exporter_commit: str | None,
               folder_name: str, fold_growth: float | None = None) -> str:
    # Corpus and budget are the pretraining run's; a fine-tuned checkpoint names the one it started from.
    own = run_record(source.checkpoint)
    pretraining = run_record(Path(source.origin)) if source.finetuned else own
    config = pretraining.get("config", {})
    summary = own.get("summary", {})
    data = config.get("data", {}) if isinstance(config, dict) else {}
    pipeline = {"ArmlmForCausalLM": "text-generation", "ArmlmForMaskedLM": "fill-mask",
                "ArmlmForSequenceClassification": "text-classification",
                "ArmlmForTokenClassification": "token-classification"}[source.architecture]
    auto = source.architecture.replace("Armlm", "AutoModel")
    remote = "" if native else ", trust_remote_code=True"
    lines = [
        "---", "library_name: transformers", f"pipeline_tag: {pipeline}", "tags: [armlm]", "---", "",
        f"# {folder_name}", "",
        f"An armlm {'fine-tuned ' + source.task['name'] + ' model' if source.finetuned else 'pretraining checkpoint'}, "
        f"objective **{source.objective}**{' (' + source.reference + ')' if source.reference else ''}, exported as "
        f"`{target}`{'' if native else ' (armlm modelling file, loaded with trust_remote_code=True)'}.", "",
        "```python",
        f"from transformers import AutoTokenizer, {auto}",
        f'tokenizer = AutoTokenizer.from_pretrained("{folder_name}"{remote})',
        f'model = {auto}.from_pretrained("{folder_name}"{remote})',
        "```", "",
        "| | |", "|---|---|",
        f"| objective | {source.objective} (`{source.origin}`) |",
        f"| model | {', '.join(f'{k}={v}' for k, v in source.model.items())} |",
        f"| attention (base model, task heads) | {source.attention} |",
        f"| corpus | {json.dumps(data.get('corpus')) if data else 'not recorded'} |",
        f"| tokenizer | {json.dumps(data.get('tokenizer')) if data else 'not recorded'} |",
        f"| trained length (tokens) | {source.trained_length} |",
        f"| budget | max_tokens={config.get('max_tokens')}, max_flops={config.get('max_flops')}, "
        f"data_epochs={config.get('data_epochs')}, seed={config.get('seed')} |" if config else "| budget | not recorded |",
        *checkpoint_rows(source, summary, pretraining.get("summary", {}).get("tokens_seen")),
        f"| BabyLM 2025 pipeline backend | {babylm_backend_text(source)} |",
        f"| armlm commit (training) | {source.commit or 'not recorded'} |",
        f"| armlm commit (export) | {exporter_commit or 'not recorded'} |",
        f"| parity with armlm (fp32) | max abs logit diff {parity.max_abs_logit_diff:.2e} over {parity.positions} rows "
        f"(tolerance {PARITY_TOLERANCE:g}); top prediction agrees on {parity.same_argmax:.0%} |",
    ]
    if fold_growth:
        lines.append(f"| LM-head bias | folded into GPT-2's untied head: exact, parity above is fp32. The fold multiplies "
                     f"rounding of the last hidden state by about {fold_growth:.1f}, so a bf16/fp16 load carries about "
                     "that many times armlm's own rounding: load in fp32, or export with format=remote for half "
                     "precision |")
    if source.finetuned:
        lines.append(f"| labels | {', '.join(source.task['labels']) or 'regression'} |")
    lines += ["", "Validation figures are armlm's: an AR model's `val/loss` is an exact NLL per token, an MLM's an "
              "NLL over masked positions only; compare runs only through armlm's reports (docs/results/).", ""]
    return "\n".join(lines)


def babylm_backend_text(source: ExportSource) -> str:
    if source.finetuned:
        return "not a pretraining checkpoint"
    if source.babylm_backend is None:
        return f"none: no backend of babylm/evaluation-pipeline-2025 reads a {source.objective}"
    return f"`{source.babylm_backend}` (its `--backend {source.babylm_backend}`)"


def checkpoint_rows(source: ExportSource, summary: dict[str, Any], run_tokens: int | None) -> list[str]:
    """Tokens seen and validation figures of the exported weights. `summary` and `run_tokens` describe the run's end
    (a fine-tuned model: its task's dev metrics and its pretraining run's tokens): a word milestone or any earlier
    checkpoint is told apart by its own token count, and the end's figures are named as such, never as its own."""
    own_tokens = source.tokens_seen if source.tokens_seen is not None else run_tokens
    rows = [f"| tokens seen in pretraining | {'not recorded' if own_tokens is None else own_tokens} |"]
    words = milestone_words(source.checkpoint.name)
    if words is not None:
        rows.append(f"| BabyLM word milestone | {milestone_name(words)}: saved at the end of the first optimiser step "
                    f"whose batches reach {words:,} words (whitespace words seen, repeats included) |")
    if source.finetuned or run_tokens is None or own_tokens == run_tokens:
        rows.append(f"| validation | {validation_figures(summary)} |")
    else:
        rows.append(f"| validation | not recorded for this checkpoint; the run's end, at {run_tokens} tokens: "
                    f"{validation_figures(summary)} |")
    return rows


def validation_figures(summary: dict[str, Any]) -> str:
    if not summary:
        return "not recorded"
    if "task" in summary:  # fine-tuning's results.json: the task's metrics per dev split
        return json.dumps(summary.get("metrics"))
    keys = ("val_loss", "val_loss_kind", "val_ppl", "val_likelihood", "unigram_baseline")
    return ", ".join(f"{k}={summary[k]}" for k in keys if summary.get(k) is not None) or "not recorded"
