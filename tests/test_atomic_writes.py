"""Checkpoints and caches are replaced whole or not at all, and two runs sharing a cache folder do not corrupt it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from tokenizers import Tokenizer

import armlm.training.checkpoint_io as checkpoint_io
from armlm.datamodules.corpora import EmbeddedWikipedia, TextFiles
from armlm.datamodules.shards import read_shards
from armlm.datamodules.tokenizer import encode_documents
from armlm.training.checkpoint_io import AtomicCheckpointIO

REPO = Path(__file__).resolve().parents[1]


def test_a_checkpoint_write_that_dies_half_way_keeps_the_previous_file(tmp_path, monkeypatch):
    path = tmp_path / "checkpoints" / "last.ckpt"
    io = AtomicCheckpointIO()
    io.save_checkpoint({"step": 1, "w": torch.ones(3)}, path)

    def dies_half_way(obj, f, *args, **kwargs):
        f.write(b"\x80\x02half a checkpoint")
        raise KeyboardInterrupt("killed while writing")

    monkeypatch.setattr(checkpoint_io.torch, "save", dies_half_way)
    with pytest.raises(KeyboardInterrupt):
        io.save_checkpoint({"step": 2, "w": torch.zeros(3)}, path)
    monkeypatch.undo()
    kept = torch.load(path, weights_only=True)
    assert kept["step"] == 1 and torch.equal(kept["w"], torch.ones(3))
    assert [p.name for p in path.parent.iterdir()] == ["last.ckpt"]  # the temporary file is gone
    io.save_checkpoint({"step": 3, "w": torch.zeros(3)}, path)
    assert torch.load(path, weights_only=True)["step"] == 3


BUILD_CACHE = """
import sys
from armlm.datamodules.corpora import TextFiles
from armlm.datamodules.pretrain import PretrainDataModule
dm = PretrainDataModule(TextFiles([sys.argv[1]], blank_line_documents=True), {"vocab_size": 800},
                        cache_dir=sys.argv[2], block_size=32, batch_size=4)
dm.setup("fit")
print(dm.cache_paths().tokenizer.parent)
"""


@pytest.mark.slow
def test_two_runs_building_one_cache_at_once_leave_a_consistent_cache(tmp_path):
    paragraphs = [p for doc in EmbeddedWikipedia().load()["train"][:6] for p in doc.split("\n\n") if p.strip()]
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n\n".join(paragraphs), encoding="utf-8")
    cache = tmp_path / "cache"
    runs = [subprocess.Popen([sys.executable, "-c", BUILD_CACHE, str(corpus), str(cache)], cwd=REPO,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outputs = [run.communicate(timeout=300) for run in runs]
    assert [run.returncode for run in runs] == [0, 0], [err[-2000:] for _, err in outputs]
    (root,) = {out.strip() for out, _ in outputs}  # both read the same entry
    root = Path(root)
    assert not list(root.parent.rglob(".*tmp*")), "a temporary folder was left behind"
    # The cache is exactly what one process alone would write: the corpus encoded by the cached tokenizer.
    tokenizer = Tokenizer.from_file(str(root / "tokenizer" / "tokenizer.json"))
    documents = TextFiles([str(corpus)], blank_line_documents=True).load()
    for split in ("train", "validation"):
        tokens, offsets = encode_documents(tokenizer, documents[split], desc=split)
        cached_tokens, cached_offsets = read_shards(root / f"{split}-shards")
        np.testing.assert_array_equal(np.asarray(cached_tokens), tokens)
        np.testing.assert_array_equal(cached_offsets, offsets)
