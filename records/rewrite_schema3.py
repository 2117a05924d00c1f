"""Rewrite run and study artefacts once into schema version 3, the format today's readers read.

    python records/rewrite_schema3.py <folder> [<folder> ...]      (a study root, a record, a run folder)

Until schema 3 every reader brought older artefacts up to date as it read them (common/migrations.py's read-time
shims). Those shims are gone: this script does the same rewrite once, on disk, and readers refuse artefacts older
than version 3, naming this command. It ran over records/ in the commit that added it; a user's own folders from
before then need it once. Each file is rewritten atomically (the old file stays whole until the new one replaces it),
only where it is older than version 3, so running it twice changes nothing. Checkpoints are not touched: their
migrations stay in common/migrations.py, since users hold checkpoints.

What each kind gains, with the date its writer started writing it (the shims' own record):
- summary.json: keys added from 22 November 2026 on are null (unknown); `val_loss_kind` of the objectives that
  existed before it was named (23 November); `val/mask_share` NaN (unknown, never 0) for a mixture whose writer
  logged only its components' shares (26 November); `own_below_unigram` approximated from the objective's own held-out
  loss against the all-token unigram baseline where it was not logged (issue 46), marked
  `own_below_unigram_approximate: true` (false where measured).
- results.json: `input_mask_share` null before 21 November; the task's `primary_metric` before schema 2.
- stage.json: `seconds` null before 25 November; "max_flops=null" and "data_epochs=null" (train.yaml's own
  defaults, spelled out by plans between 1fafc9d and 0d6bf9c) dropped from the overrides.
- diagnostics.json: `pair_context: sentence` before it was a setting; likelihood keys of 23-24 November null
  (`target_met` true: earlier bounds had no target); empty left-shift sections; which perplexity a sequence score
  holds (`ppl` for AR, `pseudo_ppl` otherwise).
- zeroshot.json: BLiMP's `syntax/semantics` spelling merged into `syntax_semantics`, one field row (25 November):
  values weighted by paradigms, counts summed, the merged field's bootstrap interval null (it was never drawn).
- every other JSON artefact (kept.json, words.json, items.json): only its version.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from armlm.common.atomic import atomic_write_text  # noqa: E402  (the repository on the path first)
from armlm.common.migrations import task_info_defaults  # noqa: E402  (the tasks' metrics before schema 2)

VERSION = 3
ARTEFACTS = {"summary.json", "results.json", "stage.json", "diagnostics.json", "zeroshot.json", "kept.json",
             "words.json", "items.json"}
SUMMARY_KEYS_ADDED = ("train_tokens", "epochs", "max_train_tokens", "flops_seen", "val_likelihood",
                      "val_likelihood_tag", "precision", "train_words", "words_seen", "branch_from")
VAL_LOSS_KINDS = {"AutoregressiveLM": "next_token", "MaskedLM": "masked_token", "MaskedLMWithNSP": "masked_token"}
RESTATED_NULL_BUDGETS = {"max_flops=null", "data_epochs=null"}
LIKELIHOOD_KEYS_ADDED = {"nll_per_token_without_eod": None, "eod_targets": None, "blocks_fingerprint": None,
                         "target_met": True, "unigram_nll_per_token_without_eod": None, "below_unigram": None}
LEFT_SHIFT_KEYS = ("shift_left", "shift_left_read_tokens", "shift_left_masks_seen", "shift_left_random")
BLIMP_FIELD_SPELLINGS = {"syntax/semantics": "syntax_semantics"}


def summary(old: dict[str, Any]) -> dict[str, Any]:
    out = {key: None for key in SUMMARY_KEYS_ADDED} | old
    if not out.get("val_loss_kind") and out.get("objective") in VAL_LOSS_KINDS:
        out["val_loss_kind"] = VAL_LOSS_KINDS[out["objective"]]
    metrics = out.get("metrics")
    if isinstance(metrics, dict) and "val/mask_share" not in metrics and any(k.endswith("mask_share") for k in metrics):
        out["metrics"] = {**metrics, "val/mask_share": math.nan}
    margins = out.get("own_below_unigram")
    out["own_below_unigram_approximate"] = out.get("own_below_unigram_approximate", not margins)
    if not margins:
        metrics, unigram = out.get("metrics") or {}, out.get("unigram_baseline")
        own = metrics.get("val/nelbo", out.get("val_loss"))
        margins = None if unigram is None or own is None else (
            {"all": unigram - own} | {tag.removeprefix("val/loss_"): unigram - value for tag, value in metrics.items()
                                      if tag.startswith("val/loss_")})
    out["own_below_unigram"] = margins
    return out


def results(old: dict[str, Any]) -> dict[str, Any]:
    out = {"input_mask_share": None} | old
    out["primary_metric"] = out.get("primary_metric") or task_info_defaults({"name": old["task"]})["primary_metric"]
    return out


def stage(old: dict[str, Any]) -> dict[str, Any]:
    out = {"seconds": None} | old
    if isinstance(out.get("overrides"), list):
        out["overrides"] = [o for o in out["overrides"] if o not in RESTATED_NULL_BUDGETS]
    return out


def diagnostics(old: dict[str, Any]) -> dict[str, Any]:
    out = {"pair_context": "sentence"} | old
    if isinstance(out.get("likelihood"), dict):
        out["likelihood"] = LIKELIHOOD_KEYS_ADDED | out["likelihood"]
    if isinstance(out.get("representations"), dict):
        out["representations"] = {key: {} for key in LEFT_SHIFT_KEYS} | out["representations"]
    sequence = out.get("sequence")
    if isinstance(sequence, dict) and not sequence.get("perplexity_kind"):
        out["sequence"] = {**sequence, "perplexity_kind": "ppl" if "ppl" in sequence else "pseudo_ppl"}
    return out


def _merged_fields(rows: list[dict[str, Any]], weights: dict[str, int]) -> list[dict[str, Any]]:
    """Field rows under their current names; the rows of one field merged where its first spelling stood."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        if row["level"] == "field":
            groups.setdefault(BLIMP_FIELD_SPELLINGS.get(row["name"], row["name"]), []).append(row)
    out = []
    for row in rows:
        name = BLIMP_FIELD_SPELLINGS.get(row["name"], row["name"])
        parts = groups.get(name) if row["level"] == "field" else None
        if parts is None or (len(parts) == 1 and name == row["name"]):
            out.append(row)
        elif row is parts[0]:
            total = sum(weights.get(p["name"], 1) for p in parts)
            merged: dict[str, Any] = {"level": "field", "name": name}
            for key in (k for k in row if k not in ("level", "name")):
                merged[key] = (sum(p[key] for p in parts) if key in ("pairs", "paradigms") else
                               None if key in ("ci_low", "ci_high") else
                               sum(p[key] * weights.get(p["name"], 1) for p in parts) / total)
            out.append(merged)
    return out


def zeroshot(old: dict[str, Any]) -> dict[str, Any]:
    blimp = old.get("blimp")
    if not isinstance(blimp, dict):
        return old

    def paradigms(rows: list[dict[str, Any]]) -> dict[str, int]:
        return {r["name"]: r["paradigms"] for r in rows if r["level"] == "field"}

    results_by_method = blimp.get("results", {})
    first = paradigms(next(iter(results_by_method.values()), []))  # the release's rows: as their table weighted them
    merged = {**blimp, "results": {m: _merged_fields(rows, paradigms(rows)) for m, rows in results_by_method.items()}}
    if "published" in blimp:
        merged["published"] = _merged_fields(blimp["published"], first)
    return {**old, "blimp": merged}


REWRITES = {"summary.json": summary, "results.json": results, "stage.json": stage, "diagnostics.json": diagnostics,
            "zeroshot.json": zeroshot}


def rewritten(name: str, artefact: dict[str, Any]) -> dict[str, Any]:
    """The artefact in schema version 3, the version first as writers put it."""
    current = REWRITES.get(name, dict)(artefact)
    return {"schema_version": VERSION, **{k: v for k, v in current.items() if k != "schema_version"}}


def rewrite_folder(folder: Path) -> int:
    """Rewrite every artefact older than version 3 under `folder` (frozen reports excepted); how many."""
    count = 0
    for path in sorted(folder.rglob("*.json")):
        if path.name not in ARTEFACTS or "report" in path.relative_to(folder).parts[:-1]:
            continue
        old = json.loads(path.read_text())
        if int(old.get("schema_version", 1)) >= VERSION:
            continue
        compact = "\n" not in path.read_text().strip()  # kept as it was written: one line or indented
        new = rewritten(path.name, old)
        atomic_write_text(path, json.dumps(new, separators=(",", ":")) if compact else json.dumps(new, indent=2))
        count += 1
    return count


def main(argv: list[str]) -> None:
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        return
    for folder in map(Path, argv):
        if not folder.is_dir():
            sys.exit(f"rewrite_schema3: {folder} is not a folder; give a study root, a record or a run folder")
        print(f"{folder}: {rewrite_folder(folder)} artefacts rewritten into schema version {VERSION}")


if __name__ == "__main__":
    main(sys.argv[1:])
