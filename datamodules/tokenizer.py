"""The tokenizer trained once per corpus with `tokenizers` (WordPiece by default, byte-level BPE as an
option), and the token cache it produces."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
from tqdm.auto import tqdm

from common.vocabulary import EOD, SPECIAL_TOKENS, Vocabulary
from datamodules.cache import atomic_directory

ENCODE_BATCH = 64  # documents per encode_batch call: large enough for the Rust threads, small for the bar
TOKENIZER_KINDS = ("wordpiece", "byte_bpe")


@dataclass(frozen=True)
class TokenizerSettings:
    vocab_size: int = 8192
    lowercase: bool = True
    min_frequency: int = 2
    kind: str = "wordpiece"  # BERT's WordPiece, or GPT-2's byte-level BPE (no [UNK], exact round trip)

    def __post_init__(self) -> None:
        for name in ("vocab_size", "min_frequency"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise ValueError(f"data.tokenizer.{name}={value!r} must be an integer")
        if self.kind not in TOKENIZER_KINDS:
            raise ValueError(f"data.tokenizer.kind={self.kind!r}; choose one of {TOKENIZER_KINDS}")
        smallest = len(SPECIAL_TOKENS) + 26  # the special tokens plus room for an alphabet
        if self.vocab_size < smallest:
            raise ValueError(f"data.tokenizer.vocab_size={self.vocab_size} is too small; use at least {smallest}")
        if self.min_frequency < 1:
            raise ValueError(f"data.tokenizer.min_frequency={self.min_frequency} must be >= 1")

    def to_dict(self) -> dict:
        return asdict(self)


def train_tokenizer(documents: list[str], settings: TokenizerSettings) -> Tokenizer:
    special = list(SPECIAL_TOKENS)  # ids 0..5 in this order, the same in every tokenizer
    common = {"vocab_size": settings.vocab_size, "min_frequency": settings.min_frequency,
              "special_tokens": special, "show_progress": False}
    if settings.kind == "wordpiece":
        tokenizer = Tokenizer(models.WordPiece(unk_token="[UNK]"))
        tokenizer.normalizer = normalizers.BertNormalizer(lowercase=settings.lowercase)
        tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        tokenizer.decoder = decoders.WordPiece()
        trainer = trainers.WordPieceTrainer(**common)
    else:
        tokenizer = Tokenizer(models.BPE())
        tokenizer.normalizer = normalizers.Sequence(
            [normalizers.NFC()] + ([normalizers.Lowercase()] if settings.lowercase else [])
        )
        tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tokenizer.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), **common)
    tokenizer.train_from_iterator(documents, trainer=trainer, length=len(documents))
    return canonical_ids(tokenizer)


def canonical_ids(tokenizer: Tokenizer) -> Tokenizer:
    """The same tokenizer with ids in a fixed order: the special tokens first (0-5), then every other token
    sorted by its string. The trainers of `tokenizers` learn the same vocabulary in every process but number
    it in hash-map order, which differs from process to process, so without this a fresh cache gave the same
    text other ids and a run did not reproduce. Neither WordPiece's longest match nor BPE's merges (kept as
    strings) depend on the ids, so the tokens a text becomes are unchanged."""
    spec = json.loads(tokenizer.to_str())
    vocab: dict[str, int] = spec["model"]["vocab"]
    ordinary = sorted(token for token in vocab if token not in SPECIAL_TOKENS)
    spec["model"]["vocab"] = {token: i for i, token in enumerate([*SPECIAL_TOKENS, *ordinary])}
    for added in spec.get("added_tokens", []):
        added["id"] = spec["model"]["vocab"][added["content"]]
    return Tokenizer.from_str(json.dumps(spec))


def vocabulary_of(tokenizer: Tokenizer, unigram_counts: np.ndarray) -> Vocabulary:
    ids = [tokenizer.token_to_id(t) for t in SPECIAL_TOKENS]
    if any(i is None for i in ids):
        raise ValueError(f"tokenizer lacks special tokens {SPECIAL_TOKENS}; delete its cache folder to rebuild")
    return Vocabulary(tokenizer.get_vocab_size(), *ids, unigram_counts=unigram_counts)


def token_dtype(vocab_size: int) -> type:
    return np.uint16 if vocab_size <= np.iinfo(np.uint16).max + 1 else np.uint32


def encode_documents(tokenizer: Tokenizer, documents: list[str], desc: str) -> tuple[np.ndarray, np.ndarray]:
    """Flat token ids with [EOD] after every document, and doc offsets (start of each doc, then the end)."""
    eod = tokenizer.token_to_id(EOD)
    dtype = token_dtype(tokenizer.get_vocab_size())
    chunks: list[np.ndarray] = []
    lengths: list[int] = []
    with tqdm(total=len(documents), desc=f"tokenizing {desc}", unit="doc") as bar:
        for start in range(0, len(documents), ENCODE_BATCH):
            batch = documents[start : start + ENCODE_BATCH]
            for enc in tokenizer.encode_batch(batch, add_special_tokens=False):
                if not enc.ids:
                    continue
                chunks.append(np.asarray(enc.ids + [eod], dtype=dtype))
                lengths.append(len(enc.ids) + 1)
            bar.update(len(batch))
    tokens = np.concatenate(chunks) if chunks else np.zeros(0, dtype=dtype)
    offsets = np.concatenate([[0], np.cumsum(lengths, dtype=np.int64)]).astype(np.int64)
    return tokens, offsets


def write_token_cache(folder: Path, tokens: np.ndarray, offsets: np.ndarray) -> None:
    with atomic_directory(folder) as tmp:
        np.save(tmp / "tokens.npy", tokens)
        np.save(tmp / "doc_offsets.npy", offsets)


def read_token_cache(folder: Path) -> tuple[np.ndarray, np.ndarray]:
    """Memory-mapped tokens (never loaded whole) and the document offsets."""
    return np.load(folder / "tokens.npy", mmap_mode="r"), np.load(folder / "doc_offsets.npy")
