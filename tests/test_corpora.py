from pathlib import Path

import pytest

from armlm.datamodules.corpora import EmbeddedWikipedia, Mixture, TextFiles, split_by_document, tidy_wiki_text


@pytest.fixture(scope="module")
def wiki_docs():
    return EmbeddedWikipedia().read_documents()


def test_embedded_wikipedia_has_the_107_articles(wiki_docs):
    assert len(wiki_docs) == 107
    # One page ("Wikipedia:Adding Wikipedia articles to Nupedia") is all markup and filters to nothing.
    assert [title for title, text in wiki_docs if not text.strip()] == ["Wikipedia:Adding Wikipedia articles to Nupedia"]
    chars = sum(len(text) for _, text in wiki_docs)
    assert 2.9e6 < chars < 3.2e6
    text = dict(wiki_docs)["Anarchism"]
    assert text.startswith("Anarchism is a political philosophy")
    assert "'''" not in text and "[[" not in text and "{{" not in text


def test_list_and_indentation_markers_are_stripped_from_line_starts():
    text = "Intro.\n* First item\n** Nested, item\n:: Indented text\n; Term\n# Numbered\n*\nA * inside stays."
    assert tidy_wiki_text(text).splitlines() == ["Intro.", "First item", "Nested, item", "Indented text", "Term",
                                                 "Numbered", "", "A * inside stays."]


def test_no_embedded_wikipedia_line_starts_with_a_list_marker(wiki_docs):
    """Before the markers were stripped, 39 % of the held-out diagnostic sentences began with `*`."""
    lines = [line for _, text in wiki_docs for line in text.split("\n") if line.strip()]
    marked = [line for line in lines if line.lstrip()[:1] in "*#:;"]
    assert len(marked) <= len(lines) // 1000, marked[:5]  # a few begin with a marker after a non-\n line break


def test_split_is_by_document_deterministic_and_order_independent(wiki_docs):
    a = split_by_document(wiki_docs, 0.05)
    b = split_by_document(list(reversed(wiki_docs)), 0.05)
    assert set(a["validation"]) == set(b["validation"]) and set(a["train"]) == set(b["train"])
    assert len(a["validation"]) == round(106 * 0.05)
    assert not set(a["train"]) & set(a["validation"])
    assert len(a["train"]) + len(a["validation"]) == 106  # empty documents are dropped


def test_text_files_one_document_per_file_or_per_blank_line(tmp_path: Path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "a.txt").write_text("first doc\nline two\n\nstill first")
    (tmp_path / "sub" / "b.txt").write_text("second doc")
    (tmp_path / ".hidden").write_text("ignored")
    per_file = TextFiles([str(tmp_path)], val_fraction=0.0).load()
    assert sorted(per_file["train"]) == ["first doc\nline two\n\nstill first", "second doc"]
    per_block = TextFiles([str(tmp_path)], val_fraction=0.0, blank_line_documents=True).load()
    assert sorted(per_block["train"]) == ["first doc\nline two", "second doc", "still first"]


def test_empty_and_missing_corpora_get_clear_errors(tmp_path: Path):
    (tmp_path / "empty.txt").write_text("  \n\n")
    with pytest.raises(ValueError, match="no non-empty documents"):
        TextFiles([str(tmp_path / "empty.txt")]).load()
    with pytest.raises(FileNotFoundError, match="does not exist"):
        TextFiles([str(tmp_path / "nope.txt")]).load()
    (tmp_path / "latin1.txt").write_bytes("caf\xe9".encode("latin-1"))
    with pytest.raises(ValueError, match="not UTF-8"):
        TextFiles([str(tmp_path / "latin1.txt")]).load()


def test_fingerprint_changes_when_a_file_changes(tmp_path: Path):
    f = tmp_path / "a.txt"
    f.write_text("one")
    before = TextFiles([str(f)]).fingerprint()
    f.write_text("one two")
    assert TextFiles([str(f)]).fingerprint() != before


def test_a_mixture_keeps_each_parts_split_and_fingerprint(tmp_path):
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        for i in range(10):
            (tmp_path / name / f"{i}.txt").write_text(f"{name} document {i}")
    parts = [TextFiles([str(tmp_path / name)], val_fraction=0.2) for name in ("a", "b")]
    mixed = Mixture(parts).load()
    for split in ("train", "validation"):
        assert mixed[split] == parts[0].load()[split] + parts[1].load()[split]
    assert len(mixed["validation"]) == 4
    assert Mixture(parts).fingerprint()["parts"] == [p.fingerprint() for p in parts]
    assert "a" in Mixture(parts).describe() and " + " in Mixture(parts).describe()
    with pytest.raises(ValueError, match="parts is empty"):
        Mixture([])


def test_streaming_text_files_give_the_same_documents_lazily(tmp_path: Path):
    paragraphs = [f"paragraph {i}\nwith a second line {i % 5}" for i in range(300)]
    (tmp_path / "a.txt").write_text("\ufeff" + "\n\n".join(paragraphs[:150]) + "\n", encoding="utf-8")
    (tmp_path / "b.txt").write_text("\n \n\n".join(paragraphs[150:]), encoding="utf-8")
    streamed = TextFiles([str(tmp_path)], val_fraction=0.1, blank_line_documents=True, streaming=True)
    train, validation = list(streamed.documents("train")), list(streamed.documents("validation"))
    assert sorted(train + validation) == sorted(paragraphs)  # each paragraph once, as the whole read cuts them
    assert not set(train) & set(validation) and 0.04 < len(validation) / 300 < 0.2
    assert train == list(streamed.documents("train"))  # the same split on every pass
    whole = TextFiles([str(tmp_path)], val_fraction=0.1, blank_line_documents=True).load()
    # The whole read cuts the same paragraphs (it keeps a file's final newline on its last one)
    assert sorted(d.strip() for d in whole["train"] + whole["validation"]) == sorted(paragraphs)
    assert streamed.load() == {"train": train, "validation": validation}  # diagnostics read the training split
    assert streamed.fingerprint() != TextFiles([str(tmp_path)], val_fraction=0.1,
                                               blank_line_documents=True).fingerprint()
    (tmp_path / "c.txt").write_bytes(b"fine\n\ncaf\xe9\n")
    with pytest.raises(ValueError, match="c.txt:3: not UTF-8"):
        list(TextFiles([str(tmp_path / "c.txt")], blank_line_documents=True, streaming=True).documents("train"))
