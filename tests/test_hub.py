from pathlib import Path

import datasets
import pytest

from datamodules.hub import HuggingFaceCorpus


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
