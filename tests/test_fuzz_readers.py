"""Property-based tests of every file reader: any bytes give parsed data or a ValueError that names the file
(and, for line formats, the line); never another exception. ARMLM_FUZZ_EXAMPLES sets the inputs per reader
(default 50, a fast-lane pass over each reader; the slow test runs 1,000 per reader in a fresh process; set it to
10,000 or more for a longer run by hand)."""

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from armlm.datamodules.conll import read_conll
from armlm.datamodules.corpora import TextFiles
from armlm.datamodules.glue import read_release_split
from armlm.datamodules.release_corpora import BrownCorpus, WikiText
from tests.helpers.configs import glue_task

EXAMPLES = int(os.environ.get("ARMLM_FUZZ_EXAMPLES", "50"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))

# Lines that are nearly valid are the ones that reach deep into a parser, so the text mixes the formats'
# own pieces (tabs, tags, labels, headings) with arbitrary characters and raw bytes.
PIECES = st.sampled_from(["\t", " ", "\n", "\r", "\r\n", "O", "B-PER", "I-LOC", "B-", "-DOCSTART-", "0", "1",
                          "2.5", "positive", "sentence", "label", "#1 String", "#2 String", "Quality",
                          " = Title = ", " = = Sub = = ", "word/nn", "``/``", "/", "\ufeff", "\x00", "é"])
TEXT = st.lists(st.one_of(PIECES, st.text(max_size=8)), max_size=40).map("".join)
CONTENT = st.one_of(TEXT.map(lambda t: t.encode("utf-8", "surrogatepass")), st.binary(max_size=200))


def accepts_or_names(read, path: Path, *, line: bool) -> None:
    """`read()` returns, or raises a ValueError whose message names `path` (and `path:<line>` if `line`)."""
    try:
        read()
    except ValueError as err:
        message = str(err)
        assert str(path) in message, message
        if line and "UTF-8" not in message:
            assert f"{path}:" in message, message


def write(folder: Path, name: str, content: bytes) -> Path:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content)
    return path


@FUZZ
@given(content=CONTENT, task=st.sampled_from(["cola", "sst2", "mrpc", "stsb"]))
def test_glue_tsv(content: bytes, task: str) -> None:
    spec = glue_task(task)
    with tempfile.TemporaryDirectory() as tmp:
        path = write(Path(tmp), f"{spec.folder}/train.tsv", content)
        accepts_or_names(lambda: read_release_split(spec, Path(tmp), "train"), path, line=True)


@FUZZ
@given(content=CONTENT)
def test_conll(content: bytes) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = write(Path(tmp), "eng.train", content)
        tags = ("O", "B-PER", "I-PER", "B-LOC", "I-LOC")
        accepts_or_names(lambda: read_conll(path, tags), path, line=True)


@FUZZ
@given(content=CONTENT, blank_lines=st.booleans())
def test_text_files(content: bytes, blank_lines: bool) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = write(Path(tmp), "doc.txt", content)
        corpus = TextFiles([str(path)], blank_line_documents=blank_lines)
        accepts_or_names(corpus.read_documents, path, line=False)


@FUZZ
@given(content=CONTENT)
def test_brown(content: bytes) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = write(Path(tmp), "ca01", content)
        accepts_or_names(BrownCorpus(tmp).read_documents, path, line=False)


@FUZZ
@given(content=CONTENT)
def test_wikitext(content: bytes) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = write(Path(tmp), "wiki.train.tokens", content)
        accepts_or_names(WikiText(str(path)).load, path, line=False)


@pytest.mark.slow
def test_thousands_of_inputs_per_reader() -> None:
    """1,000 inputs for each reader above, in a fresh process (more cost the suite minutes: docs/results/performance.md,
    "Figures moved out of code comments"; ARMLM_FUZZ_EXAMPLES=10000 by hand for more)."""
    env = {**os.environ, "ARMLM_FUZZ_EXAMPLES": "1000"}
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", __file__,
                             "-k", "not thousands"], env=env, capture_output=True, text=True, timeout=1800,
                            cwd=Path(__file__).resolve().parents[1])
    assert result.returncode == 0, result.stdout[-3000:]
