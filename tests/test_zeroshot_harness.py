"""lm-evaluation-harness's `armlm` model type: its loglikelihoods against lm-eval's own `hf` backend on the export
of the same AR checkpoint, BLiMP through lm-eval against `armlm zeroshot`, the rolling windows, generation, and the
local task folder (the last needs no lm-eval)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import ChainMap
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from armlm.common.errors import ArmlmError
from armlm.zeroshot.lm_eval_tasks import GROUP, write_blimp_tasks
from tests.helpers.blimp import write_paradigm

TEXTS = ["the city of london is the capital of the country .", "he said that it was a fine day",
         "the cat sat on the mat and the dog slept", "in the year after the war , the people of the"]
PAIRS = [("the city of", " london is the capital"), ("", "the cat sat on the mat ."), ("he said that", " it was"),
         ("in the year after the war ,", " the"), ("the people of the", "")]


def test_the_local_blimp_tasks_are_one_per_paradigm_and_a_macro_group(tmp_path):
    data = tmp_path / "blimp"
    data.mkdir()
    write_paradigm(data, "agr_1", "agreement", "morphology", [("the cat runs", "the cat run")])
    write_paradigm(data, "island_1", "islands", "syntax", [("who left", "who did left")])
    names = write_blimp_tasks(data, tmp_path / "tasks")
    assert names == [f"{GROUP}_agr_1", f"{GROUP}_island_1"]
    group = yaml.safe_load((tmp_path / "tasks" / f"{GROUP}.yaml").read_text())
    assert group["task"] == names and group["aggregate_metric_list"][0]["weight_by_size"] is False
    task = yaml.safe_load((tmp_path / "tasks" / f"{GROUP}_agr_1.yaml").read_text())
    assert Path(task["dataset_kwargs"]["data_files"]["train"]) == (data / "agr_1.jsonl").resolve()
    assert task["doc_to_choice"] == "{{[sentence_good, sentence_bad]}}" and task["doc_to_target"] == 0
    with pytest.raises(FileNotFoundError, match="no BLiMP"):
        write_blimp_tasks(tmp_path / "tasks", tmp_path / "more")


lm_eval = pytest.importorskip("lm_eval", reason="lm-evaluation-harness is not installed: pip install -e '.[lm-eval]'")
from lm_eval.api.instance import Instance  # noqa: E402

from armlm.interchange.export import export_checkpoint  # noqa: E402
from armlm.zeroshot.harness import ArmlmLM  # noqa: E402


def requests(kind: str, args: list[tuple]) -> list[Instance]:
    return [Instance(kind, {}, a, k) for k, a in enumerate(args)]


@pytest.fixture(scope="module")
def hf_lm():
    return pytest.importorskip("lm_eval.models.huggingface", reason="lm-eval's hf extra is not installed").HFLM


def test_loglikelihoods_equal_lm_evals_hf_backend_on_the_export(untrained, hf_lm, tmp_path):
    ours = ArmlmLM(checkpoint=str(untrained["ar"]))
    pairs = [p for p in PAIRS if p[1]]
    mine = ours.loglikelihood(requests("loglikelihood", pairs), disable_tqdm=True)
    rolling = ours.loglikelihood_rolling(requests("loglikelihood_rolling", [(t,) for t in TEXTS]), disable_tqdm=True)
    for form in ("native", "remote"):
        export_checkpoint(untrained["ar"], tmp_path / form, format=form)
        hf = hf_lm(pretrained=str(tmp_path / form), device="cpu", batch_size=2, trust_remote_code=form == "remote")
        assert hf.max_length == ours.window == 32  # the positions trained, not the table's 512
        theirs = hf.loglikelihood(requests("loglikelihood", pairs), disable_tqdm=True)
        np.testing.assert_allclose([m[0] for m in mine], [t[0] for t in theirs], atol=1e-4, rtol=0)
        assert [m[1] for m in mine] == [t[1] for t in theirs]
        # Rolling: the tokenizer already starts the text with [CLS]; lm-eval adds its own unless told not to.
        plain = hf_lm(pretrained=str(tmp_path / form), device="cpu", batch_size=2, add_bos_token=False,
                      trust_remote_code=form == "remote")
        theirs = plain.loglikelihood_rolling(requests("loglikelihood_rolling", [(t,) for t in TEXTS]), disable_tqdm=True)
        np.testing.assert_allclose(rolling, theirs, atol=1e-4, rtol=0)
    with pytest.raises(ValueError, match=r"starts with \[CLS\] \[CLS\].*add_bos_token=False"):
        hf.loglikelihood_rolling(requests("loglikelihood_rolling", [(TEXTS[0],)]), disable_tqdm=True)


def test_rolling_windows_score_every_token_once_each_window_led_by_cls(untrained):
    ours = ArmlmLM(checkpoint=str(untrained["mlm"]), method="pll")
    text = " ".join(TEXTS * 3)
    ids = ours.tokenizer.encode(text, add_special_tokens=False).ids
    windows = ours.rolling_windows(text)
    assert len(windows) > 1 and all(len(w.ids) <= ours.window and w.ids[0] == ours.cls_id for w in windows)
    assert [i for w in windows for i in w.ids[w.first_target:]] == ids
    assert all(len(w.ids) == ours.window for w in windows[1:])  # later windows carry as much context as fits
    total = ours.loglikelihood_rolling(requests("loglikelihood_rolling", [(text,)]), disable_tqdm=True)[0]
    assert total == pytest.approx(float(ours.scorer.score(windows, "pll", progress=False).log_prob.sum()), abs=1e-6)


@pytest.mark.slow
def test_blimp_through_lm_eval_gives_zeroshots_accuracy(tiny_pretrained, untrained, hf_lm, tmp_path):
    """Every objective with a reading, through armlm's model type, against `armlm zeroshot` (equal but for a tie,
    which lm-eval counts right and armlm wrong); and the AR export through lm-eval's own `hf` type (what babylm-eval
    runs) against armlm's type on the same task, pair for pair (issue 86)."""
    from lm_eval.tasks import TaskManager

    from armlm.zeroshot.run import run_zeroshot, zeroshot_config

    data = tmp_path / "blimp"
    data.mkdir()
    write_paradigm(data, "agr_1", "agreement", "morphology",
                   [("the cat runs .", "the cat run ."), ("the cats run .", "the cats runs ."),
                    ("he is there .", "he are there ."), ("they were here .", "they was here .")])
    # the last pair ties: two characters no tiny tokenizer saw, both [UNK], so the same ids in every reading
    write_paradigm(data, "island_1", "islands", "syntax", [("who left ?", "who did left ?"),
                                                           ("what fell ?", "what did fell ?"),
                                                           ("the man who left", "the man who did left"),
                                                           ("the ☃ left .", "the ☂ left .")])
    write_blimp_tasks(data, tmp_path / "tasks")
    manager = TaskManager(include_path=str(tmp_path / "tasks"))
    runs = ChainMap(tiny_pretrained, untrained)  # trained AR and MLM; the other objectives as initialised
    accuracy = {}
    for objective, method in (("ar", "exact"), ("mlm", "pll"), ("mlm", "pll_word_l2r"), ("hybrid", "exact"),
                              ("hybrid", "pll"), ("masked_diffusion", "bound")):
        ours = run_zeroshot(zeroshot_config([f"checkpoint={runs[objective]}", f"blimp.dir={data}",
                                             f"methods=[{method}]", f"output_dir={tmp_path / objective / method}",
                                             "bootstrap.resamples=50"]))
        theirs = lm_eval.simple_evaluate(model=ArmlmLM(checkpoint=str(runs[objective]), method=method),
                                         tasks=[GROUP], task_manager=manager, verbosity="ERROR")
        accuracy[objective, method] = theirs["results"][GROUP]["acc,none"]
        rows = ours["blimp"]["results"][method]
        paradigms = [r for r in rows if r["level"] == "paradigm"]
        assert rows[0]["level"] == "overall" and [r["ties"] for r in paradigms] == [0, 1]
        # equal but for the tie: armlm counts it wrong; lm-eval's np.argmax takes the first of equal scores, the good
        # sentence, and counts it right (a macro over paradigms, so the tie weighs 1/4 of one of two)
        tie_share = np.mean([r["ties"] / r["pairs"] for r in paradigms])
        assert accuracy[objective, method] == pytest.approx(rows[0]["accuracy"] + tie_share)
    export_checkpoint(runs["ar"], tmp_path / "ar-export")
    # one request a batch: no padding, so the tied pair's two sentences go through the same arithmetic
    hf = hf_lm(pretrained=str(tmp_path / "ar-export"), device="cpu", batch_size=1, trust_remote_code=True)
    same = {name: lm_eval.simple_evaluate(model=model, tasks=[GROUP], task_manager=manager, log_samples=True,
                                          verbosity="ERROR") for name, model in (("hf", hf), ("armlm", ArmlmLM(
                                              checkpoint=str(runs["ar"]), method="exact")))}
    assert same["hf"]["results"][GROUP]["acc,none"] == pytest.approx(accuracy["ar", "exact"])
    assert sorted(same["armlm"]["samples"]) == sorted(same["hf"]["samples"]) == [f"{GROUP}_agr_1", f"{GROUP}_island_1"]
    for task, samples in same["armlm"]["samples"].items():  # pair for pair: each sentence's log-likelihood
        theirs = same["hf"]["samples"][task]
        assert [d["acc"] for d in samples] == [d["acc"] for d in theirs]
        np.testing.assert_allclose([r[0] for d in samples for r in d["filtered_resps"]],
                                   [r[0] for d in theirs for r in d["filtered_resps"]], atol=1e-4, rtol=0)


@pytest.mark.slow
def test_lm_evals_own_model_types_stay_beside_armlms():
    """`armlm harness --model hf` (its docstring's second example, and what babylm-eval runs) must find lm-eval's hf:
    in a fresh process, as the command starts, with nothing but armlm's model type imported."""
    probe = ("import armlm.zeroshot.harness; from lm_eval.api.registry import get_model; "
             "print(get_model('armlm').__name__, get_model('hf').__name__)")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout.split() == ["ArmlmLM", "HFLM"], done.stderr[-500:]


def test_generate_until_is_the_objectives_sampler_cut_at_the_stop_string(untrained):
    from armlm.generation.decode import Request, left_to_right
    from armlm.generation.run import encode_prompt
    from armlm.generation.sampling import SamplingSettings

    ours = ArmlmLM(checkpoint=str(untrained["ar"]))
    (free,) = ours.generate_until(requests("generate_until", [("the city of", {"max_gen_toks": 8, "until": []})]))
    prompt = encode_prompt(ours.tokenizer, "the city of")
    greedy = Request(prompt, 8, 1, SamplingSettings(temperature=0.0), torch.tensor([0, 1, 2, 3, 4]), ours.eod_id,
                     ours.mask_id)
    row = left_to_right(ours.model, greedy, torch.Generator(), ours.reading)[0, len(prompt):].tolist()
    row = row[:row.index(ours.eod_id)] if ours.eod_id in row else row
    assert free == ours.tokenizer.decode(row) and free
    stop = free[-1]  # whatever the tiny model wrote, cut at the first occurrence of its last character
    (cut,) = ours.generate_until(requests("generate_until", [("the city of", {"max_gen_toks": 8, "until": [stop]})]))
    assert cut == free[:free.index(stop)]
    masked = ArmlmLM(checkpoint=str(untrained["mlm"]))  # iterative unmasking: its own sampler
    (text,) = masked.generate_until(requests("generate_until", [("the city of", {"max_gen_toks": 4})]))
    assert isinstance(text, str)
    with pytest.raises(ValueError, match="max_gen_toks=64 does not fit"):
        ours.generate_until(requests("generate_until", [("the", {"max_gen_toks": 64})]))
    with pytest.raises(ValueError, match=r"^max_gen_toks=0: a generation task asks for at least one token"):
        ours.generate_until(requests("generate_until", [("the", {"max_gen_toks": 0})]))


def test_bad_settings_are_refused_naming_the_fix(untrained):
    with pytest.raises(ValueError, match="cannot be scored by 'pll'.*'exact'"):
        ArmlmLM(checkpoint=str(untrained["ar"]), method="pll")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="add --device cpu"):
            ArmlmLM(checkpoint=str(untrained["ar"]), device="cuda")
    ours = ArmlmLM(checkpoint=str(untrained["ar"]))
    with pytest.raises(ValueError, match="checkpoint was trained on 32 positions"):
        ours.loglikelihood(requests("loglikelihood", [("", " ".join(TEXTS * 3))]))
    assert json.dumps(ours.loglikelihood([]))  # nothing asked, nothing scored


def test_a_model_arg_armlms_model_does_not_take_is_one_line_naming_those_it_takes(untrained):
    """lm-eval builds the model from --model_args by a string or a dict: methd=pll was a TypeError's traceback."""
    line = r"^--model_args methd=\.\.\.: armlm's model takes no such setting; did you mean method\? it takes checkpoint, "
    with pytest.raises(ArmlmError, match=line):
        ArmlmLM.create_from_arg_string(f"checkpoint={untrained['ar']},methd=pll")
    with pytest.raises(ArmlmError, match=line):
        ArmlmLM.create_from_arg_obj({"checkpoint": str(untrained["ar"]), "methd": "pll"})
    built = ArmlmLM.create_from_arg_string(f"checkpoint={untrained['ar']},method=exact", {"batch_size": 4})
    assert built.method == "exact"


@pytest.mark.slow  # lm-eval indexes its thousands of task configs at each call: about 10 s
def test_an_unknown_task_name_is_one_line_naming_where_tasks_are_listed(untrained, monkeypatch, tmp_path, data_dir):
    """lm-eval's own refusal, a ValueError traceback through `armlm harness` (probed on 5 December), is armlm's one
    line; the command line is the user's, so it asks lm-eval's task list, not armlm. Without a BLiMP folder the line
    says where blimp_local looks (the same refusal of lm-eval's, given again, not a second indexing)."""
    from armlm.zeroshot import harness_cli

    monkeypatch.setattr(sys, "argv", list(sys.argv))
    args = ["--model", "armlm", "--model_args", f"checkpoint={untrained['ar']}", "--tasks", "no_such_task"]
    line = r"^Tasks not found: no_such_task; `lm-eval ls tasks` lists lm-eval's tasks, and "
    monkeypatch.setenv("ARMLM_DATA_DIR", str(data_dir))
    with pytest.raises(ArmlmError, match=line + "armlm adds blimp_local$") as refused:
        harness_cli.main(args)
    lm_evals = refused.value.__cause__
    assert isinstance(lm_evals, ValueError)

    def refuses_again() -> None:
        raise lm_evals
    monkeypatch.setattr(harness_cli, "cli_evaluate", refuses_again)
    monkeypatch.setenv("ARMLM_DATA_DIR", str(tmp_path))
    with pytest.raises(ArmlmError, match=line + rf"armlm's blimp_local needs BLiMP in {tmp_path}/blimp$"):
        harness_cli.main(args)
