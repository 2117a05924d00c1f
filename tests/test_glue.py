import re
from collections import Counter
from pathlib import Path

import datasets
import pytest
from hydra.errors import MissingConfigException

from armlm.datamodules.glue import GlueExample, read_hub_split, read_release_split
from tests.helpers.configs import CONFIGS, glue_task, task_config
from tests.helpers.lanes import fast_lane_keeps

# Rows and label counts documented in shared/data/README.md (label ids in the hub's order).
DOCUMENTED = {
    ("cola", "train"): (8551, {1: 6023, 0: 2528}),
    ("cola", "dev"): (1043, {1: 721, 0: 322}),
    ("sst2", "train"): (67349, {1: 37569, 0: 29780}),
    ("sst2", "dev"): (872, {1: 444, 0: 428}),
    ("mrpc", "train"): (3668, {1: 2474, 0: 1194}),
    ("mrpc", "dev"): (408, {1: 279, 0: 129}),
    ("rte", "train"): (2490, {0: 1249, 1: 1241}),
    ("rte", "dev"): (277, {0: 146, 1: 131}),
}


@pytest.mark.parametrize("task,split", fast_lane_keeps(sorted(DOCUMENTED),  # SST-2's 67k-row train split: full suite
                                                       keep=set(DOCUMENTED) - {("sst2", "train")}))
def test_release_files_parse_to_the_documented_counts(data_dir, task, split):
    examples = read_release_split(glue_task(task), data_dir / "glue", split)
    rows, labels = DOCUMENTED[task, split]
    assert len(examples) == rows
    assert Counter(e.label for e in examples) == labels
    assert all(e.text_a for e in examples)
    assert all((e.text_b is not None) == (task in ("mrpc", "rte")) for e in examples)


def test_quirks_bom_header_and_unquoted_text(data_dir):
    mrpc = read_release_split(glue_task("mrpc"), data_dir / "glue", "train")
    assert mrpc[0].text_a.startswith("Amrozi accused his brother, whom he called \"the witness\"")
    cola = read_release_split(glue_task("cola"), data_dir / "glue", "train")
    assert cola[0] == GlueExample("Our friends won't buy this analysis, let alone the next one we propose.", None, 1)


def test_all_nine_tasks_are_specified():
    names = [p.stem for p in (CONFIGS / "task").glob("*.yaml") if not p.stem.startswith("_")]
    glue = [n for n in names if task_config(n).task.data._target_ == "armlm.datamodules.finetune.GlueDataModule"]
    assert sorted(glue) == sorted(["cola", "sst2", "mrpc", "qqp", "stsb", "mnli", "qnli", "rte", "wnli"])
    assert glue_task("stsb").is_regression and glue_task("mnli").dev_splits == ("dev_matched", "dev_mismatched")
    with pytest.raises(MissingConfigException, match="(?s)'task/sts'.*Available options.*stsb"):
        task_config("sts")


def write_rte(folder: Path, rows: list[str]) -> Path:
    (folder / "RTE").mkdir(parents=True, exist_ok=True)
    (folder / "RTE" / "train.tsv").write_text("index\tsentence1\tsentence2\tlabel\n" + "\n".join(rows) + "\n")
    return folder


def test_bad_rows_name_the_file_and_line(tmp_path):
    task = glue_task("rte")
    write_rte(tmp_path, ["0\ta\tb\tentailment", "1\tonly two"])
    with pytest.raises(ValueError, match=r"RTE/train.tsv:3: 2 columns"):
        read_release_split(task, tmp_path, "train")
    write_rte(tmp_path, ["0\ta\tb\tentailment", "1\ta\tb\tmaybe"])
    with pytest.raises(ValueError, match=r"RTE/train.tsv:3: label 'maybe' is not one of"):
        read_release_split(task, tmp_path, "train")
    with pytest.raises(FileNotFoundError, match=r"RTE/dev.tsv is missing.*release layout"):
        read_release_split(task, tmp_path, "dev")


def test_hub_and_release_readers_give_the_same_examples(tmp_path):
    write_rte(tmp_path / "release", ["0\tA cat sat.\tA cat is sitting.\tentailment", "1\tIt rains.\tIt is dry.\tnot_entailment"])
    hub = datasets.DatasetDict({"train": datasets.Dataset.from_dict({
        "sentence1": ["A cat sat.", "It rains."], "sentence2": ["A cat is sitting.", "It is dry."],
        "label": [0, 1], "idx": [0, 1]})})
    hub.save_to_disk(str(tmp_path / "hub"))
    task = glue_task("rte")
    release = read_release_split(task, tmp_path / "release", "train")
    assert read_hub_split(task, "train", str(tmp_path / "hub")) == release


def test_a_local_folder_that_is_not_there_is_named_as_one_not_looked_up_on_the_hub(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(datasets, "load_dataset", lambda *a, **k: pytest.fail("a path went to the hub"))
    for source in (str(tmp_path / "nowhere" / "glue"), "../shared/data/glue", "shared/data/glue"):
        with pytest.raises(FileNotFoundError, match=r"no folder .*glue \(/.*\) for GLUE rte \(train\); set ARMLM_DATA_DIR"):
            read_hub_split(glue_task("rte"), "train", source)


def test_a_relative_owner_name_path_that_is_not_there_is_tried_on_the_hub_and_named_as_a_folder_too(tmp_path,
                                                                                                   monkeypatch):
    """`data/glue` is a hub name (owner/name) and a relative folder: with no such folder it goes to the hub, and when
    that fails, where `data` is a folder here, the line names the folder it was not, so a mistyped path is seen as
    one. A hub name whose owner is no folder here (nyu-mll/glue) gets no remark about folders."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "data").mkdir()

    def offline(*args, **kwargs):
        raise ConnectionError("Couldn't reach the hub")

    monkeypatch.setattr(datasets, "load_dataset", offline)
    with pytest.raises(ConnectionError, match=rf"from the hub 'data/glue' \(nor is it a folder here: no "
                                              rf"{re.escape(str(tmp_path))}/data/glue\): Couldn't reach the hub\. Offline\? Use a local"):
        read_hub_split(glue_task("rte"), "train", "data/glue")
    with pytest.raises(ConnectionError, match=r"from the hub 'nyu-mll/glue': Couldn't reach the hub\. Offline\?"):
        read_hub_split(glue_task("rte"), "train", "nyu-mll/glue")
