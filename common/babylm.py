"""BabyLM's word milestones by name, importable without torch: the 2025 rules' schedule (a checkpoint every 1M words
up to 10M, every 10M up to 100M, every 100M up to 1B, at most 10 passes over the corpus), the checkpoint file a run
saves at each (training.milestones) and the branch name the challenge gives it (interchange.export). A study plans
stages on these names without loading the training stack."""

from __future__ import annotations

BABYLM = "babylm"
BABYLM_MAX_EPOCHS = 10
MILLION = 1_000_000
WORDS_CHECKPOINT = "words-{words}.ckpt"


def babylm_schedule(budget_words: float) -> list[int]:
    """The 2025 rules' milestones up to `budget_words`: every 1M to 10M, every 10M to 100M, every 100M to 1B."""
    points = [k * step for step in (MILLION, 10 * MILLION, 100 * MILLION) for k in range(1 if step == MILLION else 2, 11)]
    return [p for p in points if p <= budget_words]


def milestone_words(checkpoint_name: str) -> int | None:
    """The words of a milestone checkpoint's file name (words-<W>.ckpt), or None for any other file (last.ckpt,
    Lightning's -v1 copies)."""
    prefix, suffix = WORDS_CHECKPOINT.split("{words}")
    digits = checkpoint_name.removeprefix(prefix).removesuffix(suffix)
    fits = checkpoint_name.startswith(prefix) and checkpoint_name.endswith(suffix) and digits.isdigit()
    return int(digits) if fits and digits.isascii() else None


def milestone_name(words: int) -> str:
    """The challenge's branch name for a checkpoint: chck_<N>M, N the millions of words."""
    return f"chck_{words // MILLION}M" if words % MILLION == 0 else f"chck_{words / MILLION!r}M"  # exact, never rounded
