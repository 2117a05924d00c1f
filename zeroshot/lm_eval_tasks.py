"""armlm's local lm-evaluation-harness tasks, written as task YAMLs into a folder for `--include_path`.

`blimp_local`: BLiMP from a folder of the release's `<UID>.jsonl` files (default $ARMLM_DATA_DIR/blimp), one task
per paradigm (`blimp_local_<UID>`, lm-eval's own BLiMP template: the good and the bad sentence as two choices of
an empty context) and a group averaging them unweighted, a macro over paradigms as the release and `armlm zeroshot`
report it. lm-eval's `blimp` tasks read the Hugging Face hub; these read local files, so they run offline.
"""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from armlm.common.errors import ArmlmFileError

GROUP = "blimp_local"


def paradigm_task(uid: str, path: Path) -> dict:
    return {
        "task": f"{GROUP}_{uid}",
        "dataset_path": "json",
        "dataset_kwargs": {"data_files": {"train": str(path.resolve())}},
        "validation_split": "train",
        "output_type": "multiple_choice",
        "doc_to_text": "",
        "doc_to_target": 0,
        "doc_to_choice": "{{[sentence_good, sentence_bad]}}",
        "num_fewshot": 0,
        "metric_list": [{"metric": "acc", "aggregation": "mean", "higher_is_better": True}],
        "metadata": {"version": 1.0},
    }


def write_blimp_tasks(blimp_dir: str | Path, out: str | Path) -> list[str]:
    """One task YAML per `<UID>.jsonl` in `blimp_dir` and the `blimp_local` group, into `out`; the task names."""
    files = sorted(Path(blimp_dir).glob("*.jsonl"))
    if not files:
        raise ArmlmFileError(f"no BLiMP <UID>.jsonl files in {blimp_dir}; set ARMLM_DATA_DIR or give the folder "
                                "that holds the release's data/*.jsonl")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    names = []
    for path in files:
        with path.open(encoding="utf-8") as f:
            first = json.loads(f.readline())  # the UID the release writes, not only the file's name
        task = paradigm_task(str(first.get("UID", path.stem)), path)
        (out / f"{task['task']}.yaml").write_text(yaml.safe_dump(task, sort_keys=False))
        names.append(task["task"])
    group = {"group": GROUP, "task": names,
             "aggregate_metric_list": [{"metric": "acc", "aggregation": "mean", "weight_by_size": False}],
             "metadata": {"version": 1.0}}
    (out / f"{GROUP}.yaml").write_text(yaml.safe_dump(group, sort_keys=False))
    return names
