"""BLiMP (Warstadt et al. 2020): minimal pairs read from the release's layout, a pair counted right when the good
sentence scores strictly higher (a tie is wrong: a model that cannot tell the two apart has not chosen), and
accuracy per paradigm, per phenomenon (`linguistics_term`), per field and overall, each a macro average over its
paradigms as the release reports, with a bootstrap interval over pairs.

The bootstrap resamples each paradigm's pairs with replacement: the number right in a resample is then
Binomial(n, accuracy), drawn directly, and a group's resampled accuracy is the mean of its paradigms' draws.
The release's own model results (raw_results/summary/models_summary.jsonl, one row per paradigm) are averaged
over the same paradigms, so the printed figures compare like with like whatever subset a folder holds.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from armlm.common.errors import ArmlmError

FIELDS = ("sentence_good", "sentence_bad", "field", "linguistics_term", "UID")
PUBLISHED_MODELS = {"ngram": "5-gram", "lstm": "LSTM", "txl": "Transformer-XL", "gpt2": "GPT-2"}
# Over all 67 paradigms (Warstadt et al. 2020, Table 3; humans from the paper's validation), for a folder whose
# paradigms the release's per-paradigm file does not cover.
PUBLISHED_ALL_67 = {"5-gram": 0.61, "LSTM": 0.70, "Transformer-XL": 0.70, "GPT-2": 0.83, "human": 0.88}


def field_name(raw: str) -> str:
    """The release spells one of its four fields two ways (`syntax/semantics` in one paradigm's file,
    `syntax_semantics` in the others); read both as one field, so the per-field table has the paper's four."""
    return raw.replace("/", "_")


@dataclass(frozen=True)
class Paradigm:
    uid: str
    field: str
    term: str  # linguistics_term: the phenomenon
    good: tuple[str, ...]
    bad: tuple[str, ...]


def read_paradigm(path: Path) -> Paradigm:
    good, bad, meta = [], [], None
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as err:
            raise ArmlmError(f"{path}:{number} is not JSON ({err.msg}); BLiMP files hold one JSON object per line") from err
        missing = [k for k in FIELDS if k not in row]
        if missing:
            raise ArmlmError(f"{path}:{number} lacks {missing}; a BLiMP row has {list(FIELDS)}")
        here = (row["UID"], row["field"], row["linguistics_term"])
        if meta is not None and here != meta:
            raise ArmlmError(f"{path}:{number} belongs to {here}, the file's earlier rows to {meta}; one paradigm per file")
        meta = here
        good.append(row["sentence_good"])
        bad.append(row["sentence_bad"])
    if meta is None:
        raise ArmlmError(f"{path} holds no pairs; remove it or give the release's file")
    return Paradigm(meta[0], field_name(meta[1]), meta[2], tuple(good), tuple(bad))


def read_blimp(folder: str | Path, max_pairs: int | None = None) -> list[Paradigm]:
    """Every `<UID>.jsonl` in `folder` (the release's data/ layout), sorted by UID; `max_pairs` keeps the first
    pairs of each (quick runs)."""
    if max_pairs is not None and int(max_pairs) < 1:  # 0 kept no pair, and -1 silently dropped each paradigm's last
        raise ArmlmError(f"blimp.max_pairs={max_pairs}; keep at least 1 pair of each paradigm, or null for all")
    folder = Path(folder)
    files = sorted(folder.glob("*.jsonl")) if folder.is_dir() else []
    if not files:
        raise ArmlmError(f"no BLiMP paradigms (<UID>.jsonl) in {folder}; point blimp.dir at the release's data/ folder")
    paradigms = [read_paradigm(f) for f in files]
    if max_pairs is not None:
        paradigms = [Paradigm(p.uid, p.field, p.term, p.good[:max_pairs], p.bad[:max_pairs]) for p in paradigms]
    return paradigms


def pair_outcomes(paradigms: Sequence[Paradigm], score: Mapping[str, float]) -> dict[str, np.ndarray]:
    """Per paradigm, a bool per pair: the good sentence's score strictly above the bad one's."""
    return {p.uid: np.array([score[g] > score[b] for g, b in zip(p.good, p.bad, strict=True)]) for p in paradigms}


def pair_ties(paradigms: Sequence[Paradigm], score: Mapping[str, float]) -> dict[str, np.ndarray]:
    """Per paradigm, a bool per pair: both sentences scored exactly alike. A tie counts as wrong here. BabyLM's 2025
    pipeline (torch.max) and lm-evaluation-harness (np.argmax) take the first of two equal scores, and both list the
    good sentence first, so there a tie counts as right: they agree with armlm except on ties, counted beside
    accuracy."""
    return {p.uid: np.array([score[g] == score[b] for g, b in zip(p.good, p.bad, strict=True)]) for p in paradigms}


def groups(paradigms: Sequence[Paradigm]) -> dict[tuple[str, str], list[str]]:
    """(level, name) -> the paradigms it averages: every paradigm, phenomenon, field, and 'overall'."""
    out: dict[tuple[str, str], list[str]] = {}
    for p in paradigms:
        for key in (("paradigm", p.uid), ("phenomenon", p.term), ("field", p.field), ("overall", "overall")):
            out.setdefault(key, []).append(p.uid)
    return out


def accuracy_table(paradigms: Sequence[Paradigm], outcomes: Mapping[str, np.ndarray], *, resamples: int = 10_000,
                   level: float = 0.95, seed: int = 0, ties: Mapping[str, np.ndarray] | None = None) -> list[dict]:
    """One row per group: accuracy (macro over its paradigms), the bootstrap interval, pairs and paradigms, and
    (given `ties`, pair_ties) how many of its pairs tied."""
    rng = np.random.default_rng(seed)
    uids = [p.uid for p in paradigms]
    n = np.array([len(outcomes[u]) for u in uids])
    accuracy = np.array([outcomes[u].mean() for u in uids])
    draws = rng.binomial(n[:, None], accuracy[:, None], size=(len(uids), resamples)) / n[:, None]
    index = {u: k for k, u in enumerate(uids)}
    rows = []
    for (kind, name), members in groups(paradigms).items():
        at = [index[u] for u in members]
        low, high = np.quantile(draws[at].mean(0), [(1 - level) / 2, (1 + level) / 2])
        rows.append({"level": kind, "name": name, "accuracy": float(accuracy[at].mean()), "ci_low": float(low),
                     "ci_high": float(high), "pairs": int(n[at].sum()), "paradigms": len(at),
                     **({} if ties is None else {"ties": int(sum(ties[u].sum() for u in members))})})
    order = {"overall": 0, "field": 1, "phenomenon": 2, "paradigm": 3}
    return sorted(rows, key=lambda r: (order[r["level"]], r["name"]))


def read_published(path: str | Path | None) -> dict[str, dict[str, float]]:
    """The release's per-paradigm model accuracies ({UID: {model: accuracy}}), or {} when the file is absent."""
    if path is None or not Path(path).is_file():
        return {}
    out = {}
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        if row.get("UID") != "overall":
            out[row["UID"]] = {label: float(row[key]) for key, label in PUBLISHED_MODELS.items()}
    return out


def published_beside(paradigms: Sequence[Paradigm], published: Mapping[str, Mapping[str, float]]
                     ) -> dict[tuple[str, str], dict[str, float]]:
    """Each group's macro accuracy for the release's models over the same paradigms; a group with a paradigm the
    release's file lacks gets none (not the same average)."""
    out = {}
    for key, members in groups(paradigms).items():
        if all(u in published for u in members):
            out[key] = {m: float(np.mean([published[u][m] for u in members])) for m in PUBLISHED_MODELS.values()}
    return out
