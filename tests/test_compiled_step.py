"""Every objective's training step is one graph (training.compiled): `torch.compile(fullgraph=True)` traces its
forward, loss and backward with no break, gives eager's loss and gradients on the same draws, and compiles once:
later steps with other mask draws, another learning rate and a moved schedule run under
`set_stance("fail_on_recompile")`. The objectives are discovered from configs/objective/; `aot_eager` traces
forward and backward as inductor would, without generating kernels (tests/test_train.py runs inductor itself).
A compilation is most of each case's time, so a graph is compiled once for both of its proofs: the fp32 run of
blocks checks eager's loss and gradients at its first step, and documents kept apart get a case of their own."""

from __future__ import annotations

import contextlib

import pytest
import torch

from armlm.objectives.base import TrainingProgress
from armlm.training.compiled import compile_loss, datasheet_peak
from armlm.training.step_config import attention_kernels
from bench.objective_cases import objective_case, objective_names
from tests.helpers.configs import composed_config
from tests.helpers.learning import (
    assert_every_gradient_nonzero,
    assert_every_parameter_moved,
    reached_parameters,
    snapshot,
)

TOTAL_TOKENS = 10_000


def eager_and_compiled(name: str, documents: bool = False):
    case = objective_case(name, documents=documents)
    if case is None:
        pytest.skip(f"{name} joins documents on purpose (segment pairs)")
    torch._dynamo.reset()
    return case, compile_loss(case.objective, case.model, backend="aot_eager")


def loss_and_grads(loss_of, batch, trained: torch.nn.Module, seed: int):
    """The loss and the gradients of everything trained (the backbone, and an objective's own heads: ELECTRA's
    generator), from zero."""
    trained.zero_grad(set_to_none=True)
    torch.manual_seed(seed)  # the corruption's and dropout's stream, as the compiled training step seeds it
    out = loss_of(batch)
    out.loss.backward()
    return out, {name: p.grad.clone() for name, p in trained.named_parameters() if p.grad is not None}


def assert_compiled_gives_eagers_step(name: str, case, compiled, seed: int) -> None:
    """On the same draws (seed), the compiled step's loss, counts, extras, FLOPs and every gradient are eager's; the
    model is left holding the compiled step's gradients."""
    trained = torch.nn.ModuleList([case.model, case.objective])
    eager, eager_grads = loss_and_grads(lambda b: case.objective.loss(b, case.model, None), case.batch, trained, seed)
    out, grads = loss_and_grads(compiled, case.batch, trained, seed)
    torch.testing.assert_close(out.loss, eager.loss, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(out.lm_nll_sum, eager.lm_nll_sum, rtol=1e-5, atol=1e-4)
    assert int(out.predicted_tokens) == int(eager.predicted_tokens)
    assert sorted(grads) == sorted(eager_grads)
    # gradients that were zero (or NaN) on both sides would compare equal below: every one is finite and non-zero
    flat = [key for key, grad in eager_grads.items() if not (bool(grad.abs().sum() > 0) and bool(grad.isfinite().all()))]
    assert not flat, f"{name}: zero or NaN/inf gradients {flat}"
    for key, grad in grads.items():
        torch.testing.assert_close(grad, eager_grads[key], rtol=1e-4, atol=1e-5, msg=f"{name}: {key}")
    for metric, (value, count) in out.extras.items():
        torch.testing.assert_close(torch.as_tensor(value).float(), torch.as_tensor(eager.extras[metric][0]).float(),
                                   rtol=1e-4, atol=1e-5, msg=f"{name}: {metric}")
        assert float(count) == float(eager.extras[metric][1]), metric
    # a compiled step keeps every row, so its FLOPs count is at least the eager one's (the work it runs)
    assert out.forward_flops >= eager.forward_flops > 0


@pytest.mark.slow
@pytest.mark.parametrize("name", objective_names())
def test_the_step_with_documents_kept_apart_is_one_graph_with_eagers_loss_and_gradients(name):
    """Blocks holding two documents each (data.cross_document_attention=false); blocks of one stream are checked
    at the first step of the fp32 case below, on the graph it goes on to train with."""
    case, compiled = eager_and_compiled(name, documents=True)
    case.objective.set_progress(TrainingProgress(1_000, TOTAL_TOKENS) if case.objective.needs_progress else None)
    assert_compiled_gives_eagers_step(name, case, compiled, seed=0)


# Where the steps run: fp32 and bf16 autocast on the CPU, and bf16 on CUDA with trainer=gpu's attention kernels
DEVICES = [pytest.param("cpu", None, id="cpu-fp32"), pytest.param("cpu", torch.bfloat16, id="cpu-bf16"),
           pytest.param("cuda", torch.bfloat16, id="cuda-bf16",
                        marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA"))]


@pytest.mark.slow
@pytest.mark.parametrize(("device", "dtype"), DEVICES)
@pytest.mark.parametrize("name", objective_names())
def test_later_steps_learn_and_do_not_recompile_with_new_draws_rates_and_schedules(name, device, dtype):
    """Each step: every trainable gradient non-zero and finite, and every parameter moved by the optimiser (new mask
    draws alone would make the losses differ with no weight moving). In fp32 on the CPU the first step is also
    eager's, loss and gradients, on the same draws."""
    case, compiled = eager_and_compiled(name)
    model = case.model.to(device)
    case.objective.to(device)
    batch = {key: value.to(device) for key, value in case.batch.items()}
    trained = torch.nn.ModuleList([model, case.objective])
    optimizer = torch.optim.AdamW(trained.parameters(), lr=1e-3, weight_decay=0.0)  # only a gradient moves a weight
    kernels = attention_kernels(composed_config("train", ["trainer=gpu"]).trainer) if device == "cuda" else (
        contextlib.nullcontext())
    case.objective.loss(batch, model, None).loss.backward()  # eagerly: the parameters this objective's loss reaches
    reached = reached_parameters(model)
    with kernels:
        for step in range(4):
            if case.objective.needs_progress:  # a schedule moves within its first phase
                case.objective.set_progress(TrainingProgress(100 * (step + 1), TOTAL_TOKENS))
            for group in optimizer.param_groups:
                group["lr"] = 1e-3 / (step + 1)
            with torch.compiler.set_stance("fail_on_recompile" if step else "default"), torch.autocast(
                    device, dtype=dtype or torch.float32, enabled=dtype is not None):
                if step == 0 and dtype is None:  # compiles the graph, checked against eager on the same draws
                    assert_compiled_gives_eagers_step(name, case, compiled, seed=step)
                else:
                    trained.zero_grad(set_to_none=True)
                    torch.manual_seed(step)
                    compiled(batch).loss.backward()
            assert_every_gradient_nonzero(model, reached)
            before = {name: value for name, value in snapshot(model).items() if name in reached}
            optimizer.step()
            assert_every_parameter_moved(before, model)


@pytest.mark.slow
def test_a_data_dependent_branch_in_a_loss_is_refused_not_run_eagerly():
    """The proof above can fail: fullgraph turns a host read inside the step into an error."""
    case = objective_case("ar")

    class ReadsTheHost(type(case.objective)):
        def loss(self, batch, model, generator=None):
            out = super().loss(batch, model, generator)
            if bool(out.loss > 0):  # what a NaN check inside the step would do
                return out
            return out

    compiled = compile_loss(ReadsTheHost(), case.model, backend="aot_eager")
    torch._dynamo.reset()
    with pytest.raises(Exception, match="(?i)data-dependent|graph break|generic_jump"):
        compiled(case.batch)


def test_the_compile_mode_is_checked():
    case = objective_case("ar")
    with pytest.raises(ValueError, match="compile mode 'fast'; choose one of"):
        compile_loss(case.objective, case.model, mode="fast")


def test_a_cpu_has_no_datasheet_peak():
    assert datasheet_peak(torch.device("cpu")) is None


@pytest.mark.slow
def test_bert_s_fixed_count_compiles_to_the_eager_work():
    """objective.fixed_count=true (BERT's masked positions per sequence): the rows a compiled step reads are the
    drawn ones, so its FLOPs are the eager step's, and its loss and gradients are eager's."""
    case = objective_case("mlm", overrides=("+objective.fixed_count=true",))
    torch._dynamo.reset()
    compiled = compile_loss(case.objective, case.model, backend="aot_eager")
    trained = torch.nn.ModuleList([case.model, case.objective])
    eager, eager_grads = loss_and_grads(lambda b: case.objective.loss(b, case.model, None), case.batch, trained, 0)
    with torch.compiler.set_stance("default"):
        out, grads = loss_and_grads(compiled, case.batch, trained, 0)
    torch.testing.assert_close(out.loss, eager.loss, rtol=1e-5, atol=1e-5)
    for key, grad in grads.items():
        torch.testing.assert_close(grad, eager_grads[key], rtol=1e-4, atol=1e-5, msg=key)
    assert out.forward_flops == eager.forward_flops
    with torch.compiler.set_stance("fail_on_recompile"):
        loss_and_grads(compiled, case.batch, trained, 1)
