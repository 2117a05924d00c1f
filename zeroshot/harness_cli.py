"""`armlm harness <lm_eval's arguments>`: EleutherAI's lm-evaluation-harness with armlm's model type and tasks.

    armlm harness --model armlm --model_args checkpoint=outputs/mlm/<time>,method=pll --tasks blimp_local
    armlm harness --model hf --model_args pretrained=exports/ar,device=cpu --tasks blimp_local

lm-eval's own command line (`lm_eval`) has no way to load a model type from another package, so this runs it with
`armlm.zeroshot.harness` imported (`--model armlm`) and armlm's local tasks (zeroshot.lm_eval_tasks: `blimp_local` from
$ARMLM_DATA_DIR/blimp) on `--include_path`. Every other argument is lm-eval's. Needs the `lm-eval` extra:
pip install -e ".[lm-eval]".
"""

from __future__ import annotations

import sys
import tempfile

from lm_eval.__main__ import cli_evaluate

import armlm.zeroshot.harness  # noqa: F401  (registers --model armlm)
from armlm.common.config import data_dir
from armlm.common.errors import ArmlmError
from armlm.zeroshot.lm_eval_tasks import write_blimp_tasks

UNKNOWN_TASKS = "Tasks not found"  # how lm_eval.config.evaluate_config begins its refusal of unknown task names


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if any(a == "--include_path" or a.startswith("--include_path=") for a in argv):
        sys.exit("armlm harness puts armlm's own tasks on --include_path; to add your tasks too, copy them beside "
                 "armlm.zeroshot.lm_eval_tasks.write_blimp_tasks's output and run lm_eval with `import armlm.zeroshot.harness`")
    with tempfile.TemporaryDirectory(prefix="armlm-lm-eval-tasks-") as tasks:
        blimp = data_dir() / "blimp"
        if blimp.is_dir():
            write_blimp_tasks(blimp, tasks)
        sys.argv = ["lm_eval", *argv, "--include_path", tasks]
        try:
            cli_evaluate()
        except ValueError as err:  # lm-eval's word for a task name it does not know; anything else keeps its trace
            if not str(err).startswith(UNKNOWN_TASKS):
                raise
            ours = "armlm adds blimp_local" if blimp.is_dir() else f"armlm's blimp_local needs BLiMP in {blimp}"
            raise ArmlmError(f"{err}; `lm-eval ls tasks` lists lm-eval's tasks, and {ours}") from err
