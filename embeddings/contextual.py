"""Type-level vectors from a contextual checkpoint, one set per layer (Bommasani, Davis & Cardie 2020): a word's
vector is the mean, over its first `max_contexts` occurrences in the corpus, of the mean of its subwords' states.
Layer 0 is the embedding layer's output; layers 1..L the blocks'. The backbone reads each line as fine-tuning
does: its start token, the subwords and its task end (armlm's `[CLS] subwords [SEP]`; a transformers model's own
template) in its own attention, lines longer than the positions it takes cut at word boundaries."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import torch
from tokenizers import Tokenizer
from tqdm.auto import tqdm

from armlm.models.attention import Attention
from armlm.sources.armlm import armlm_special_tokens
from armlm.sources.base import Backbone, SpecialTokens


@dataclass
class Segment:
    ids: list[int]  # start token, subwords, end tokens
    token_word: list[int]  # per token: the row of its word in the vocabulary, -1 for specials and unselected words
    occurrence: list[int]  # per token: which occurrence (counted over the segment's words) it belongs to, -1 else


def segments(tokenizer: Tokenizer, sentences: Iterable[list[str]], words: list[str], max_contexts: int,
             max_length: int, special: SpecialTokens | None = None) -> list[Segment]:
    """The lines cut to `max_length` tokens (the frame's start and end tokens included: `special`, default an armlm
    tokenizer's) at word boundaries, keeping only those holding an occurrence still wanted (each word's first
    `max_contexts`, in corpus order). A word longer than the window is skipped. A line holding no occurrence still
    wanted would give only pieces that are dropped, so it is not encoded, and the reading stops once every word has
    its contexts: the pieces are the same, and a corpus whose frequent words fill early is mostly not tokenized."""
    special = armlm_special_tokens(tokenizer) if special is None else special
    start, end = special.start, special.task_end
    index = {w: i for i, w in enumerate(words)}
    seen: Counter[int] = Counter()
    filled = 0  # words with all their contexts
    kept = []
    budget = max_length - 1 - len(end)
    for sentence in sentences:
        if filled == len(index):
            break
        if not any(seen[row] < max_contexts for row in (index.get(w, -1) for w in sentence) if row >= 0):
            continue
        encoding = tokenizer.encode(sentence, is_pretokenized=True, add_special_tokens=False)
        ids = encoding.ids  # a new list at each read of the attribute: read once per line, not once per token
        spans: dict[int, list[int]] = {}
        for position, word in enumerate(encoding.word_ids):
            spans.setdefault(word, []).append(position)
        current: Segment | None = None
        for word_no, positions in spans.items():
            if len(positions) > budget:
                continue
            if current is None or len(current.ids) - 1 + len(positions) > budget:
                if current is not None:
                    kept.append(current)
                current = Segment([start], [-1], [-1])
            row = index.get(sentence[word_no], -1)
            wanted = row >= 0 and seen[row] < max_contexts
            if wanted:
                seen[row] += 1
                filled += seen[row] == max_contexts
            occurrence = max(current.occurrence) + 1 if wanted else -1
            for p in positions:
                current.ids.append(ids[p])
                current.token_word.append(row if wanted else -1)
                current.occurrence.append(occurrence)
        if current is not None:
            kept.append(current)
    finished = []
    for segment in kept:
        segment.ids.extend(end)
        segment.token_word.extend([-1] * len(end))
        segment.occurrence.extend([-1] * len(end))
        if max(segment.occurrence) >= 0:
            finished.append(segment)
    return finished


@torch.no_grad()
def type_vectors(backbone: Backbone, attention: Attention, tokenizer: Tokenizer, sentences: list[list[str]],
                 words: list[str], max_contexts: int, max_length: int, batch_size: int = 64, *,
                 special: SpecialTokens | None = None) -> np.ndarray:
    """(layers + 1, len(words), d): every word's pooled vector at every layer; NaN rows for words never seen.
    `special`: the source's frame (default an armlm tokenizer's: `[CLS] subwords [SEP]`)."""
    backbone.eval()
    special = armlm_special_tokens(tokenizer) if special is None else special
    pieces = sorted(segments(tokenizer, sentences, words, max_contexts, max_length, special), key=lambda s: len(s.ids))
    pad = 0 if special.pad is None else special.pad  # padded positions are never attended nor read
    n_layers, d = backbone.config.n_layers + 1, backbone.config.d_model
    sums = torch.zeros(n_layers, len(words), d, dtype=torch.float64)
    contexts = torch.zeros(len(words), dtype=torch.float64)
    for start in tqdm(range(0, len(pieces), batch_size), desc="type-level vectors", leave=False):
        batch = pieces[start:start + batch_size]
        width = max(len(s.ids) for s in batch)
        ids = torch.tensor([s.ids + [pad] * (width - len(s.ids)) for s in batch])
        mask = torch.tensor([[1] * len(s.ids) + [0] * (width - len(s.ids)) for s in batch])
        states = torch.stack(backbone.layer_states(ids, attention=attention, with_embeddings=True,
                                                   attention_mask=None if bool(mask.all()) else mask))  # (L+1, B, T, d)
        for row, segment in enumerate(batch):
            occurrence = torch.tensor(segment.occurrence + [-1] * (width - len(segment.ids)))
            word_of = torch.tensor(segment.token_word + [-1] * (width - len(segment.ids)))
            n_occurrences = int(occurrence.max()) + 1
            tokens = occurrence >= 0
            # Mean over each occurrence's subwords, then each occurrence adds one context to its word.
            per_occurrence = torch.zeros(n_layers, n_occurrences, d, dtype=torch.float64)
            per_occurrence.index_add_(1, occurrence[tokens], states[:, row, tokens].double())
            subwords = torch.bincount(occurrence[tokens], minlength=n_occurrences).double()
            owners = torch.full((n_occurrences,), -1, dtype=torch.long)
            owners[occurrence[tokens]] = word_of[tokens]
            sums.index_add_(1, owners, per_occurrence / subwords[None, :, None])
            contexts.index_add_(0, owners, torch.ones(n_occurrences, dtype=torch.float64))
    vectors = sums / contexts[None, :, None]  # 0 / 0 = NaN for a word with no context
    return vectors.numpy()
