"""BLiMP paradigm files (one JSON line per minimal pair) written into a folder, as the BLiMP release lays them out."""

from __future__ import annotations

import json
from pathlib import Path


def write_paradigm(folder: Path, uid: str, term: str, field: str, pairs: list[tuple[str, str]]) -> None:
    rows = [{"sentence_good": g, "sentence_bad": b, "field": field, "linguistics_term": term, "UID": uid,
             "pairID": str(k)} for k, (g, b) in enumerate(pairs)]
    (folder / f"{uid}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def write_two_paradigms(folder: Path) -> Path:
    """A BLiMP folder of two paradigms (agreement: two pairs; islands: one), for the tests that run the zero-shot
    and study commands on a model folder (the `blimp_dir` fixture)."""
    folder.mkdir()
    write_paradigm(folder, "agr_1", "subject_verb_agreement", "morphology",
                   [("The cat sat on the mat.", "The cat sit on the mat."), ("The dog was running.", "The dog were running.")])
    write_paradigm(folder, "island_1", "island_effects", "syntax", [("Who did the man see?", "Who did the man see it?")])
    return folder
