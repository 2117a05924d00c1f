"""`armlm study` end to end: a tiny study run in parallel through the joblib launcher, then completed and reported,
rerun without work and resumed after a hard kill; the findings and data-constrained studies at smoke size."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from armlm.studies.runner import RECORD
from tests.helpers.configs import composed_config
from tests.helpers.learning import logged_scalars

REPO = Path(__file__).resolve().parents[1]
TINY_STUDY = """\
name: tiny
arms:
  ar:
    pretrain: [objective=ar]
    finetune: [full, bidirectional]
  mlm:
    pretrain: [objective=mlm]
tasks: [rte]
default_variants: [full, features]
finetune_variants:
  full: [finetune.mode=full]
  features: [finetune.mode=features]
  bidirectional: [finetune.mode=full, finetune.attention=bidirectional]
diagnose:
  independence: true
  representations: true
  candidates_arm: mlm
"""


@pytest.fixture(scope="module")
def study_settings(tmp_path_factory, data_dir, cache_dir) -> list[str]:
    configs = tmp_path_factory.mktemp("study-configs")
    (configs / "study").mkdir()
    (configs / "study" / "tiny.yaml").write_text(TINY_STUDY)
    quiet = '"trainer.enable_progress_bar=false"'
    return [f"hydra.searchpath=[file://{configs}]", "study=tiny", "scale=smoke", "seeds=1", "budget=20000",
            "tasks=[rte]",
            f'extra_pretrain=[{quiet},"data.cache_dir={cache_dir}","data.tokenizer.vocab_size=1000"]',
            f'extra_finetune=[{quiet},"task.data.max_train_examples=64","task.data.max_eval_examples=64"]',
            'extra_diagnose=["pairs=4","candidates=4","representations.sentences=8"]']


def run_study(*args: str, timeout: int = 600, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    result = subprocess.run([sys.executable, "-m", "armlm", "study", *args], cwd=REPO, capture_output=True, text=True,
                            timeout=timeout, env=env)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result


def statuses(root: Path) -> dict[str, str]:
    return {s["stage"]: s["status"] for s in json.loads((root / "study.json").read_text())["stages"]}


@pytest.mark.slow
def test_a_seed_run_beside_another_computes_what_it_computes_alone(study_settings, tmp_path):
    """Issue 83's concurrent seeds: two seeds launched at once (the joblib launcher: two processes sharing the token
    cache, each running its seed's stages inside it) give each seed's pretraining the same losses and the same final
    weights, bit for bit, as the seed run alone in a process of its own: neither the neighbour nor the launch path
    changes a bit. Each stage.json says how its launch ran. One thread per process in both ways, since a thread
    count changes a reduction's order."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    together, alone = tmp_path / "together", tmp_path / "alone"
    only = ["arm=ar", "stages=[pretrain]", "report=false", *(s for s in study_settings if s != "seeds=1")]  # seed= runs one
    run_study("-m", "hydra/launcher=joblib", "hydra.launcher.n_jobs=2", "seed=1,2", f"root={together}",
              "launcher=in_process", *only, env=env)
    run_study("seed=1", f"root={alone}", *only, env=env)
    pretrain = Path("ar") / "seed1" / "pretrain"
    ours, theirs = (torch.load(root / pretrain / "checkpoints" / "last.ckpt", weights_only=True)["state_dict"]
                    for root in (together, alone))
    assert ours.keys() == theirs.keys() and all(torch.equal(ours[k], theirs[k]) for k in ours)
    assert (json.loads((together / pretrain / "summary.json").read_text())["val_loss"]
            == json.loads((alone / pretrain / "summary.json").read_text())["val_loss"])
    losses = logged_scalars(alone / pretrain, "train/loss")
    assert losses and logged_scalars(together / pretrain, "train/loss") == losses
    launched = json.loads((together / pretrain / RECORD).read_text())["launched"]
    assert launched["launcher"] == "in_process" and launched["sweep_n_jobs"] == 2 and "joblib" in launched[
        "sweep_launcher"]
    assert json.loads((alone / pretrain / RECORD).read_text())["launched"] == {
        "launcher": "process", "sweep_launcher": None, "sweep_n_jobs": None}


@pytest.mark.slow
def test_tiny_study_runs_in_parallel_completes_reports_and_reruns_without_work(study_settings, tmp_path,
                                                                               monkeypatch):
    import nbformat
    from nbclient import NotebookClient

    root = tmp_path / "tiny"
    # Both arms at once through the joblib launcher, each arm's stages inside its job's process (a process per stage
    # in both arms would start Lightning eight times). ar's diagnostics read mlm's candidates, so they may wait for
    # the second, plain launch, which runs what is left as a process per stage and writes the report; one fine-tuning
    # stage and ar's diagnostics are removed before it, so that a stage of each kind after pretraining is launched
    # as its own process whatever the first launch's timing (the seed test above launches pretraining so).
    run_study("-m", "hydra/launcher=joblib", "hydra.launcher.n_jobs=2", "arm=ar,mlm", f"root={root}",
              "launcher=in_process", *study_settings)
    ar = root / "ar" / "seed1"
    assert (ar / "pretrain" / "summary.json").is_file()
    assert (root / "mlm" / "seed1" / "diagnostics" / "diagnostics.json").is_file()
    assert not (root / "report").exists()
    assert json.loads((ar / "pretrain" / RECORD).read_text())["launched"]["launcher"] == "in_process"
    relaunched = (ar / "finetune" / "rte-bidirectional", ar / "diagnostics")
    for folder in relaunched:
        shutil.rmtree(folder, ignore_errors=True)
    run_study(f"root={root}", *study_settings)
    assert [json.loads((folder / RECORD).read_text())["launched"]["launcher"] for folder in relaunched] == [
        "process", "process"]
    assert set(statuses(root).values()) <= {"skipped", "done"} and len(statuses(root)) == 2 * (1 + 2 + 1)
    report = root / "report"
    for name in ("learning_curves", "downstream", "discrepancy", "embeddings", "gap_by_distance"):
        assert (report / f"{name}.png").stat().st_size > 10_000, name
    downstream = (report / "downstream.csv").read_text()
    assert all(f"rte,dev,accuracy,{arm},{variant}" in downstream
               for arm, variant in (("ar", "full"), ("ar", "bidirectional"), ("mlm", "features")))
    text = (report / "report.md").read_text()
    assert "| mlm | 0.1" in text  # [MASK] share of MLM pretraining inputs (15 % x 80 %, minus specials)
    ar = json.loads((root / "ar" / "seed1" / "diagnostics" / "diagnostics.json").read_text())
    assert ar["candidates_from"].endswith("mlm/seed1/diagnostics/diagnostics.json")
    assert len(ar["representations"]["geometry"]) == 2  # model=tiny: a row per layer

    # A rerun does no work (every stage skipped, no result rewritten); with record=, it keeps the finished units
    # without weights, restored on a "fresh machine" (another root) whose report, learning curves included, reads as
    # the original's
    done_files = sorted(root.glob("*/seed1/**/*.json"))
    before = {p: p.stat().st_mtime_ns for p in done_files}
    record = tmp_path / "record"
    run_study(f"root={root}", f"record={record}", *study_settings)
    assert set(statuses(root).values()) == {"skipped"} and not list(record.rglob("*.ckpt"))
    assert {p: p.stat().st_mtime_ns for p in done_files} == before
    fresh = tmp_path / "fresh"
    run_study(f"root={fresh}", f"record={record}", *study_settings)
    assert set(statuses(fresh).values()) == {"restored"}
    assert (fresh / "report" / "downstream.csv").read_text() == downstream.replace(str(root), str(fresh))
    assert (fresh / "report" / "learning_curves.png").stat().st_size > 10_000

    monkeypatch.setenv("ARMLM_STUDY", str(root))
    notebook = nbformat.read(REPO / "notebooks" / "study.ipynb", as_version=4)
    NotebookClient(notebook, timeout=300, resources={"metadata": {"path": str(REPO / "notebooks")}}).execute()
    images = [o for c in notebook.cells if c.cell_type == "code" for o in c.get("outputs", [])
              if "image/png" in o.get("data", {})]
    assert len(images) == 5  # curves, downstream, discrepancy, embeddings, gap by distance


@pytest.mark.slow
def test_a_killed_study_resumes_pretraining_from_its_last_checkpoint(study_settings, tmp_path):
    root = tmp_path / "killed"
    args = [sys.executable, "-m", "armlm", "study", f"root={root}", *study_settings, "arm=mlm", "tasks=[]", "budget=150000",
            "+study.arms.mlm.diagnose=false", "study.diagnose.candidates_arm=null"]
    run_dir = root / "mlm" / "seed1" / "pretrain"
    process = subprocess.Popen(args, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               start_new_session=True)
    deadline = time.monotonic() + 300
    while not (run_dir / "checkpoints" / "last.ckpt").is_file() and process.poll() is None:
        assert time.monotonic() < deadline, "no checkpoint within 300 s"
        time.sleep(0.05)
    os.killpg(process.pid, signal.SIGKILL)  # a hard crash of the driver and its running stage
    process.wait()
    assert not (run_dir / "summary.json").exists(), "the run finished before it could be killed"

    result = subprocess.run(args, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    record = json.loads((run_dir / RECORD).read_text())
    assert record["launches"] == 2 and f"ckpt_path={run_dir / 'checkpoints' / 'last.ckpt'}" in record["command"]
    assert record["started_at"] is None  # the second launch came back
    summary = json.loads((run_dir / "summary.json").read_text())
    per_step = 16 * 64  # scale=smoke: batch 16 x block 64
    assert summary["steps"] == -(-150000 // per_step)  # the whole budget, not a fresh run's count
    assert summary["tokens_seen"] == summary["steps"] * per_step  # the count went on from the checkpoint


# Arms whose stages take the same path as ar's and mlm's (pretrain, fine-tune `full`), left out of the smoke run to
# keep the suite short, with the findings that read them; the plan test composes every arm's configs, and the
# objective contract trains, fine-tunes and diagnoses every objective.
SMOKE_WITHOUT = ["~study.arms.mlm_mask100", "~study.findings.F5_mask_shift", "~study.findings.F5_features",
                 "~study.checks.own_loss_mask100"]


@pytest.mark.slow
def test_findings_study_smoke_run_writes_a_verdict_for_every_finding(tmp_path, data_dir, cache_dir):
    """study=findings end to end at a tiny size: the arms pretrained, fine-tuned with their variants (AR's causal
    tagger at last subwords, 3 epochs), diagnosed (representations with the random-token control, the common-scale
    likelihood), scored on BLiMP in both readings, and report/findings.md with one verdict per finding (one seed:
    none reproduced, which is the honest verdict there)."""
    import pandas as pd

    from armlm.analysis.findings.verdicts import VERDICTS

    root = tmp_path / "findings"
    quiet = '"trainer.enable_progress_bar=false"'
    run_study("study=findings", "scale=smoke", "seeds=1", "budget=20000", f"root={root}", "launcher=in_process",
              *SMOKE_WITHOUT,
              f'extra_pretrain=[{quiet},"data.cache_dir={cache_dir}","data.tokenizer.vocab_size=300"]',
              f'extra_finetune=[{quiet},"task.data.max_train_examples=64","task.data.max_eval_examples=64"]',
              'extra_diagnose=["pairs=3","representations.sentences=8","likelihood.blocks=4","likelihood.max_draws=4"]',
              f'study.zeroshot.settings=["blimp.max_pairs=3","blimp.context.tokens=8",'
              f'"blimp.context.file={data_dir}/wikitext-2/wiki.valid.tokens"]', timeout=900)
    study = composed_config("study", ["study=findings", *SMOKE_WITHOUT]).study
    findings = study.findings
    assert "F1_objective" in findings and "F5_shift" in study.withdrawn and "F6" not in findings
    table = pd.read_csv(root / "report" / "findings.csv")
    assert list(table["finding"]) == list(findings)
    assert set(table["verdict"]) <= set(VERDICTS) and (table["n"] == 1).all()
    # every arm has its own held-out loss in its summary, so the gate reads a number, never a missing one
    assert not table["gate_note"].fillna("").str.contains("no own held-out loss").any()
    for arm in ("ar", "mlm"):
        report = json.loads((root / arm / "seed1" / "diagnostics" / "diagnostics.json").read_text())
        assert "below_unigram" in report["likelihood"] and report["representations"]["shift_left_random"]
        assert "pairwise" not in report  # no independence diagnostics under this registration
    finetuned = json.loads((root / "ar" / "seed1" / "finetune" / "conll2003-full" / "results.json").read_text())
    assert (finetuned["attention"], finetuned["word_subword"], finetuned["epochs"]) == ("causal", "last", 3)
    text = (root / "report" / "findings.md").read_text()
    assert "| F1 |" in text and "## Checks (reported, not judged)" in text and "shift_mlm_left_random" in text
    # the zero-shot stage: the mlm arm by both PLLs (Z1, Z2), AR by its exact log-probability, each also after the
    # fixed context block; 3 pairs x 36 paradigms
    scored = json.loads((root / "mlm" / "seed1" / "zeroshot" / "zeroshot.json").read_text())
    assert set(scored["blimp"]["results"]) == {"pll", "pll_word_l2r", "pll@context", "pll_word_l2r@context"}
    assert scored["blimp"]["paradigms"] + len(scored["blimp"]["paradigms_left_out"]) == 36  # 300-token vocabulary
    ar_scored = json.loads((root / "ar" / "seed1" / "zeroshot" / "zeroshot.json").read_text())["blimp"]["results"]
    assert {"exact", "exact@context"} == set(ar_scored)
    assert {"Z1_pll_vs_exact", "Z2_word_l2r"} <= set(table["finding"])
    blimp = (root / "report" / "blimp.md").read_text()  # the study's BLiMP table, every arm by its methods
    assert "| mlm | pll_word_l2r | 1 |" in blimp and "| ar | exact | 1 |" in blimp


@pytest.mark.slow
def test_data_constrained_smoke_run_reports_nll_against_epochs(tmp_path, cache_dir):
    """AR and masked diffusion at 1 and 16 epochs over 4,096 unique tokens, and their fresh-data controls over
    16 x as many seen once (tiny model): the repeated runs pass over the same slice, the controls run the same
    steps, and the report has the epochs table and figure and a row per finding."""
    import pandas as pd

    root = tmp_path / "data_constrained"
    quiet = '"trainer.enable_progress_bar=false"'
    run_study("study=data_constrained", "scale=smoke", "seeds=1", "study.unique_tokens=4096", f"root={root}",
              "launcher=in_process",
              *[f"~study.arms.{o}_{arm}" for o in ("ar", "mdlm") for arm in ("e2", "e4", "e8")],
              "study.arms.ar_fresh16.unique_tokens=65536", "study.arms.mdlm_fresh16.unique_tokens=65536",
              'extra_diagnose=["likelihood.blocks=4","likelihood.max_draws=4"]',
              f'extra_pretrain=[{quiet},"data.cache_dir={cache_dir}","data.tokenizer.vocab_size=300"]', timeout=900)
    summary = json.loads((root / "mdlm_e16" / "seed1" / "pretrain" / "summary.json").read_text())
    # 4,096 tokens make 65 blocks of [CLS] + 63, 4 full batches of 16: 4,096 input positions per epoch
    assert summary["train_tokens"] == 4096 and summary["epochs"] == 16 and summary["val_likelihood"] > 0
    epochs = pd.read_csv(root / "report" / "epochs.csv")
    nll = epochs[epochs["quantity"] == "val_likelihood"]
    assert set(zip(nll["objective"], nll["epochs"], nll["train_tokens"])) == {
        (o, e, t) for o in ("AutoregressiveLM", "MaskedDiffusionLM") for e, t in ((1.0, 4096), (16.0, 4096), (1.0, 65536))}
    fresh = json.loads((root / "mdlm_fresh16" / "seed1" / "pretrain" / "summary.json").read_text())
    # the control runs the repeated run's steps, to a batch: 65,536 fresh tokens pack one more full batch of blocks
    assert summary["steps"] == 64 and fresh["steps"] == 65
    assert (root / "report" / "epochs.png").stat().st_size > 10_000
    assert "## Repeated data" in (root / "report" / "report.md").read_text()
    findings = pd.read_csv(root / "report" / "findings.csv")
    assert set(findings["finding"]) == {"F6_fresh", "F7_ar_pays_for_repetition", "F7_diffusion_pays_less"}
    assert (findings["n"] <= 1).all() and "reproduced" not in set(findings["verdict"])  # one seed: not judged
