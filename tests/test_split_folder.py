"""SplitTextFolder: a corpus that comes split reads its own train/ and validation/, each document once, and refuses a
folder without one; the staged gutenwiki-10m as its README counts it."""

import json
from pathlib import Path

import pytest

from armlm.datamodules.split_folder import SplitTextFolder


def write_split_folder(root: Path, splits: dict[str, list[list[str]]]) -> None:
    """Each split a folder of files, each file its documents separated by one blank line."""
    for split, files in splits.items():
        (root / split).mkdir(parents=True)
        for i, docs in enumerate(files):
            (root / split / f"part{i}.txt").write_text("\n\n".join(docs) + "\n", encoding="utf-8")


def test_a_split_folder_reads_its_own_splits_each_document_once(tmp_path: Path):
    train = [[f"train {i}\nsecond paragraph {i}" for i in range(5)], ["train 5", "train 6"]]
    validation = [["valid 0", "valid 1\nits paragraph"]]
    write_split_folder(tmp_path, {"train": train, "validation": validation, "test": [["held back"]]})
    corpus = SplitTextFolder(str(tmp_path))
    whole = corpus.load()
    assert whole == {"train": train[0] + train[1], "validation": validation[0]}  # test/ is never read
    streamed = SplitTextFolder(str(tmp_path), streaming=True)
    assert {split: list(streamed.documents(split)) for split in ("train", "validation")} == whole
    assert streamed.fingerprint() == corpus.fingerprint()  # the same documents, so the same cache
    per_file = SplitTextFolder(str(tmp_path), blank_line_documents=False).load()
    assert len(per_file["train"]) == 2 and per_file["train"][1] == "train 5\n\ntrain 6\n"
    before = corpus.fingerprint()
    (tmp_path / "validation" / "part0.txt").write_text("valid 0 changed\n", encoding="utf-8")
    assert SplitTextFolder(str(tmp_path)).fingerprint() != before


def test_a_split_folder_without_a_split_is_refused_by_name(tmp_path: Path):
    write_split_folder(tmp_path, {"train": [["only train"]]})
    with pytest.raises(ValueError, match=r"has no validation/ folder: .*data=text"):
        SplitTextFolder(str(tmp_path))
    with pytest.raises(FileNotFoundError, match="ARMLM_DATA_DIR"):
        SplitTextFolder(str(tmp_path / "absent"))
    (tmp_path / "validation").mkdir()
    (tmp_path / "validation" / "blank.txt").write_text("\n \n", encoding="utf-8")
    with pytest.raises(ValueError, match="validation split .* no non-empty documents"):
        SplitTextFolder(str(tmp_path)).load()


@pytest.mark.slow
def test_gutenwiki_keeps_every_document_in_exactly_one_split(data_dir):
    """The staged corpus as its README counts it: documents per split from the title lists, whitespace words."""
    folder = data_dir / "gutenwiki-10m"
    splits = SplitTextFolder(str(folder)).load()
    titles = [json.loads((folder / f"{source}_titles.json").read_text()) for source in ("gutenberg", "wikipedia")]
    for split in ("train", "validation"):
        assert len(splits[split]) == sum(len(t[split]) for t in titles)
    assert sum(len(d.split()) for d in splits["train"]) == 10_026_686
    assert sum(len(d.split()) for d in splits["validation"]) == 518_269
    assert not set(splits["train"]) & set(splits["validation"])
