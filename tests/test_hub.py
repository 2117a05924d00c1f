from pathlib import Path

import datasets
import pytest

from armlm.datamodules.hub import HuggingFaceCorpus


def test_packaged_builder_with_local_files_reads_rows(tmp_path: Path):
    train = tmp_path / "train.parquet"
    valid = tmp_path / "valid.parquet"
    datasets.Dataset.from_dict({"body": ["doc one", "", "doc two"], "id": [1, 2, 3]}).to_parquet(train)
    datasets.Dataset.from_dict({"body": ["held out"], "id": [4]}).to_parquet(valid)
    corpus = HuggingFaceCorpus("parquet", text_column="body",
                               data_files={"train": str(train), "validation": str(valid)})
    assert corpus.load() == {"train": ["doc one", "doc two"], "validation": ["held out"]}
    with pytest.raises(ValueError, match="text_column"):
        HuggingFaceCorpus("parquet", text_column="text", data_files={"train": str(train)}, val_split=None).load()


def test_wikitext_rows_regroup_into_articles(tmp_path: Path):
    rows = ["", " = First = \n", "", " a line \n", " = = Sub = = \n", " = Second = \n", " b line \n"]
    path = tmp_path / "wt.parquet"
    datasets.Dataset.from_dict({"text": rows}).to_parquet(path)
    corpus = HuggingFaceCorpus("parquet", data_files={"train": str(path)}, val_split=None,
                               wikitext_articles=True, val_fraction=0.0)
    train = corpus.load()["train"]
    assert len(train) == 2 and train[0].startswith("= First =") and "= = Sub = =" in train[0]


def test_offline_hub_name_gets_an_error_naming_the_fix(monkeypatch):
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", True)
    with pytest.raises(ConnectionError, match="local corpus"):
        HuggingFaceCorpus("armlm-test/not-a-cached-dataset", "x").load()


def test_fingerprint_tracks_the_split_mapping_and_file_contents(tmp_path: Path):
    a, b = tmp_path / "a.parquet", tmp_path / "b.parquet"
    datasets.Dataset.from_dict({"text": ["one"]}).to_parquet(a)
    datasets.Dataset.from_dict({"text": ["two"]}).to_parquet(b)
    corpus = lambda files: HuggingFaceCorpus("parquet", data_files=files)
    straight = corpus({"train": str(a), "validation": str(b)}).fingerprint()
    assert straight != corpus({"train": str(b), "validation": str(a)}).fingerprint()
    datasets.Dataset.from_dict({"text": ["one", "more"]}).to_parquet(a)
    assert straight != corpus({"train": str(a), "validation": str(b)}).fingerprint()


def test_streaming_reads_a_local_dataset_folder_row_by_row(tmp_path: Path):
    """streaming=true on a folder of local files (how the hub's streaming path is tested offline): the same texts as
    the whole-split read, each in exactly one split by its own hash, read lazily."""

    texts = [f"document {i} " + "word " * (i % 7 + 1) for i in range(400)] + ["", "   "]
    folder = tmp_path / "dataset"
    folder.mkdir()
    for part in range(3):  # a dataset folder of several files
        datasets.Dataset.from_dict({"text": texts[part::3]}).to_json(folder / f"part-{part}.jsonl")
    files = {"train": sorted(str(p) for p in folder.glob("*.jsonl"))}
    streamed = HuggingFaceCorpus("json", data_files=files, val_split=None, streaming=True, val_fraction=0.1)
    train, validation = list(streamed.documents("train")), list(streamed.documents("validation"))
    assert not isinstance(streamed.documents("train"), list)  # a generator: nothing is held
    whole = HuggingFaceCorpus("json", data_files=files, val_split=None).load()
    assert sorted(train + validation) == sorted(whole["train"] + whole["validation"])
    assert not set(train) & set(validation) and 0.05 < len(validation) / 400 < 0.15
    assert streamed.fingerprint() != HuggingFaceCorpus("json", data_files=files, val_split=None).fingerprint()
    with pytest.raises(ValueError, match="text_column"):
        list(HuggingFaceCorpus("json", data_files=files, text_column="body", streaming=True,
                               val_split=None).documents("train"))
    with pytest.raises(ValueError, match="wikitext_articles=false"):
        HuggingFaceCorpus("json", data_files=files, wikitext_articles=True, streaming=True)
    assert streamed.load() == {"train": train, "validation": validation}  # diagnostics read the training split
