"""A text's log-likelihood in units that compare across tokenizers: per word and per byte, beside per token.

Per-token figures depend on how a tokenizer cuts the text (BERT's WordPiece and GPT-2's byte-level BPE give the same
sentence different token counts), so they compare only between models of one tokenizer. A sum over the whole text
divided by its UTF-8 bytes (bits per byte) or its whitespace-separated words does not depend on the tokenizer; it
compares across models when the texts are the same and each model's figure is of one kind (an exact
log-likelihood, a pseudo-log-likelihood or a bound: those three are different quantities whatever the unit).
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from armlm.common.errors import ArmlmError


def text_units(texts: Iterable[str]) -> tuple[int, int]:
    """(words, UTF-8 bytes) of the texts: words split on whitespace."""
    words = n_bytes = 0
    for text in texts:
        words += len(text.split())
        n_bytes += len(text.encode("utf-8"))
    return words, n_bytes


def likelihood_units(log_prob: float, tokens: int, words: int, n_bytes: int) -> dict[str, float]:
    """A summed log-likelihood (nats, <= 0) per token, per word (nats) and per byte (bits)."""
    if min(tokens, words, n_bytes) < 1:
        raise ArmlmError(f"tokens={tokens}, words={words}, bytes={n_bytes}: a likelihood per unit needs text")
    return {"nll_per_token": -log_prob / tokens, "nll_per_word": -log_prob / words,
            "bits_per_byte": -log_prob / math.log(2) / n_bytes}
