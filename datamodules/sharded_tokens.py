"""A split's token shards presented as one flat array of token ids (`len`, integer and slice indexing, `head`), so
packed blocks and segment pairs index the stream as they would one file, while each shard stays memory-mapped."""

from __future__ import annotations

import operator

import numpy as np

from armlm.common.errors import ArmlmError


class ShardedTokens:
    """A split's shards as one flat, memory-mapped array of token ids (never loaded whole)."""

    def __init__(self, parts: list[np.ndarray]) -> None:
        self.parts = [p for p in parts if len(p)] or parts[:1]
        self.starts = np.concatenate([[0], np.cumsum([len(p) for p in self.parts], dtype=np.int64)])
        self.dtype = self.parts[0].dtype if self.parts else np.dtype(np.uint16)

    def __len__(self) -> int:
        return int(self.starts[-1])

    @property
    def shape(self) -> tuple[int]:
        return (len(self),)

    def __getitem__(self, index: int | slice) -> np.ndarray | np.integer:
        if isinstance(index, slice):
            start, stop, step = index.indices(len(self))
            if step != 1:
                raise ArmlmError("ShardedTokens slices with step 1 only")
            return self.read(start, stop)
        index = operator.index(index)
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError(f"token {index} of {len(self)}")
        part = int(np.searchsorted(self.starts, index, side="right")) - 1
        return self.parts[part][index - self.starts[part]]

    def read(self, start: int, stop: int) -> np.ndarray:
        """Tokens [start, stop) of the stream (a view inside one shard, a copy across shards)."""
        if not 0 <= start <= len(self) or not 0 <= stop <= len(self):
            raise IndexError(f"tokens [{start}, {stop}) of {len(self)}")
        if stop <= start:
            return np.zeros(0, dtype=self.dtype)
        first = int(np.searchsorted(self.starts, start, side="right")) - 1
        last = int(np.searchsorted(self.starts, stop - 1, side="right")) - 1
        if first == last:
            base = self.starts[first]
            return np.asarray(self.parts[first][start - base:stop - base])
        pieces = []
        for part in range(first, last + 1):
            base = int(self.starts[part])
            pieces.append(self.parts[part][max(start - base, 0):min(stop - base, len(self.parts[part]))])
        return np.concatenate(pieces)

    def head(self, n: int) -> ShardedTokens:
        """The first n tokens, still sharded and mapped."""
        parts, left = [], n
        for part in self.parts:
            if left <= 0:
                break
            parts.append(part[:left])
            left -= len(part)
        return ShardedTokens(parts)

    def bincount(self, minlength: int) -> np.ndarray:
        """Token counts, one shard (and chunk) at a time."""
        counts = np.zeros(minlength, dtype=np.int64)
        for part in self.parts:
            for start in range(0, len(part), 1 << 24):
                counts += np.bincount(part[start:start + (1 << 24)], minlength=minlength)[:minlength]
        return counts

    def __array__(self, dtype: np.dtype | None = None, copy: bool | None = None) -> np.ndarray:
        whole = self.read(0, len(self))
        return whole if dtype is None else whole.astype(dtype)
