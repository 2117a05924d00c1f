"""The tokenizer trained once per corpus with `tokenizers` (WordPiece by default, byte-level BPE as an
option), on the whole train split or a bounded sample of it, and in-memory encoding (the cache: datamodules.shards)."""

from __future__ import annotations

import json
import random
from collections.abc import Iterable
from dataclasses import asdict, dataclass

import numpy as np
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
from tqdm.auto import tqdm

from armlm.common.errors import ArmlmError
from armlm.common.vocabulary import EOD, SPECIAL_TOKENS, Vocabulary

ENCODE_BATCH = 64  # documents per encode_batch call: large enough for the Rust threads, small for the bar
SAMPLE_PIECE_CHARS = 4096  # the tokenizer sample draws pieces of documents this long (whole shorter ones)
SAMPLE_SEED = 0  # fixed: every run, arm and seed on a corpus shares one tokenizer
TOKENIZER_KINDS = ("wordpiece", "byte_bpe")


@dataclass(frozen=True)
class TokenizerSettings:
    vocab_size: int = 8192
    lowercase: bool = True
    min_frequency: int = 2
    kind: str = "wordpiece"  # BERT's WordPiece, or GPT-2's byte-level BPE (no [UNK], exact round trip)
    # Train on a seeded sample of at most this many characters of the train split (a corpus far larger than
    # memory); None trains on all of it.
    sample_chars: int | None = None

    def __post_init__(self) -> None:
        for name in ("vocab_size", "min_frequency"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise ArmlmError(f"data.tokenizer.{name}={value!r} must be an integer")
        if self.kind not in TOKENIZER_KINDS:
            raise ArmlmError(f"data.tokenizer.kind={self.kind!r}; choose one of {TOKENIZER_KINDS}")
        smallest = len(SPECIAL_TOKENS) + 26  # the special tokens plus room for an alphabet
        if self.vocab_size < smallest:
            raise ArmlmError(f"data.tokenizer.vocab_size={self.vocab_size} is too small; use at least {smallest}")
        if self.min_frequency < 1:
            raise ArmlmError(f"data.tokenizer.min_frequency={self.min_frequency} must be >= 1")
        if self.sample_chars is not None and (isinstance(self.sample_chars, bool) or not isinstance(self.sample_chars, int)
                                              or self.sample_chars < SAMPLE_PIECE_CHARS):
            raise ArmlmError(f"data.tokenizer.sample_chars={self.sample_chars!r}: give at least {SAMPLE_PIECE_CHARS} "
                             "characters, or null to train on the whole train split")

    def to_dict(self) -> dict:
        """The settings that key the cache; sample_chars only when set, so caches of whole-split tokenizers keep
        their keys."""
        settings = asdict(self)
        if settings["sample_chars"] is None:
            del settings["sample_chars"]
        return settings


def train_tokenizer(documents: Iterable[str], settings: TokenizerSettings) -> Tokenizer:
    """Trained on `documents`, or on their sample when settings.sample_chars is set."""
    if settings.sample_chars is not None:
        documents = tokenizer_sample(documents, settings.sample_chars)
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
    length = len(documents) if isinstance(documents, list) else None
    tokenizer.train_from_iterator(documents, trainer=trainer, length=length)
    return canonical_ids(tokenizer)


def tokenizer_sample(documents: Iterable[str], max_chars: int, seed: int = SAMPLE_SEED) -> list[str]:
    """A uniform, seeded sample of the documents' text, at most `max_chars` long, in one pass and bounded memory:
    documents cut into pieces of SAMPLE_PIECE_CHARS (at a space where there is one), reservoir-sampled
    (Vitter's algorithm R) into max_chars / SAMPLE_PIECE_CHARS slots."""
    rng = random.Random(seed)
    slots = max(max_chars // SAMPLE_PIECE_CHARS, 1)
    reservoir: list[str] = []
    seen = 0
    for text in documents:
        start = 0
        while start < len(text):
            end = min(start + SAMPLE_PIECE_CHARS, len(text))
            if end < len(text):
                space = text.rfind(" ", start + 1, end)
                end = space if space > start else end
            piece = text[start:end]
            start = end
            seen += 1
            if len(reservoir) < slots:
                reservoir.append(piece)
            else:
                slot = rng.randrange(seen)
                if slot < slots:
                    reservoir[slot] = piece
    return reservoir


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
        raise ArmlmError(f"tokenizer lacks special tokens {SPECIAL_TOKENS}; delete its cache folder to rebuild")
    return Vocabulary(tokenizer.get_vocab_size(), *ids, unigram_counts=unigram_counts)


def token_dtype(vocab_size: int) -> type:
    return np.uint16 if vocab_size <= np.iinfo(np.uint16).max + 1 else np.uint32


def encode_documents(tokenizer: Tokenizer, documents: list[str], desc: str = "",
                     progress: bool = True, eod: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Flat token ids with [EOD] (or the id `eod`: another tokenizer's document end) after every document (empty ones
    dropped), and doc offsets (start of each doc, then the end). ENCODE_BATCH documents per call: an Encoding holds far more than its ids (offsets, masks, words).
    `encode_batch_fast` skips the character offsets, which nothing here reads: the same ids, faster on one thread
    (docs/results/performance.md, "The data path at corpus scale")."""
    eod = tokenizer.token_to_id(EOD) if eod is None else eod
    dtype = token_dtype(tokenizer.get_vocab_size())
    chunks: list[np.ndarray] = []
    lengths: list[int] = []
    with tqdm(total=len(documents), desc=f"tokenizing {desc}", unit="doc", disable=not progress) as bar:
        for start in range(0, len(documents), ENCODE_BATCH):
            batch = documents[start : start + ENCODE_BATCH]
            for enc in tokenizer.encode_batch_fast(batch, add_special_tokens=False):
                ids = enc.ids  # each read of .ids builds a new Python list from the Rust one
                if not ids:
                    continue
                ids.append(eod)
                chunks.append(np.asarray(ids, dtype=dtype))
                lengths.append(len(ids))
            bar.update(len(batch))
    tokens = np.concatenate(chunks) if chunks else np.zeros(0, dtype=dtype)
    offsets = np.concatenate([[0], np.cumsum(lengths, dtype=np.int64)]).astype(np.int64)
    return tokens, offsets
