"""Every objective's training step is one graph (training.compiled): `torch.compile(fullgraph=True)` traces its
forward, loss and backward with no break, gives eager's loss and gradients on the same draws, and compiles once:
later steps with other mask draws, another learning rate and a moved schedule run under
`set_stance("fail_on_recompile")`. The objectives are discovered from configs/objective/; `aot_eager` traces
forward and backward as inductor would, without generating kernels (tests/test_train.py runs inductor itself)."""

from __future__ import annotations

import pytest
import torch

from bench.objective_cases import objective_case, objective_names
from objectives.base import TrainingProgress
from training.compiled import compile_loss, datasheet_peak

TOTAL_TOKENS = 10_000


def eager_and_compiled(name: str, documents: bool = False):
    case = objective_case(name, documents=documents)
    if case is None:
        pytest.skip(f"{name} joins documents on purpose (segment pairs)")
    torch._dynamo.reset()
    return case, compile_loss(case.objective, case.model, backend="aot_eager")


def loss_and_grads(loss_of, batch, model, seed: int):
    model.zero_grad(set_to_none=True)
    torch.manual_seed(seed)  # the corruption's and dropout's stream, as the compiled training step seeds it
    out = loss_of(batch)
    out.loss.backward()
    return out, {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}


@pytest.mark.slow
@pytest.mark.parametrize("documents", [False, True], ids=["blocks", "documents-apart"])
@pytest.mark.parametrize("name", objective_names())
def test_the_step_is_one_graph_with_eagers_loss_and_gradients(name, documents):
    case, compiled = eager_and_compiled(name, documents)
    case.objective.set_progress(TrainingProgress(1_000, TOTAL_TOKENS) if case.objective.needs_progress else None)
    eager, eager_grads = loss_and_grads(lambda b: case.objective.loss(b, case.model, None), case.batch, case.model, 0)
    out, grads = loss_and_grads(compiled, case.batch, case.model, 0)
    torch.testing.assert_close(out.loss, eager.loss, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(out.lm_nll_sum, eager.lm_nll_sum, rtol=1e-5, atol=1e-4)
    assert int(out.predicted_tokens) == int(eager.predicted_tokens)
    assert sorted(grads) == sorted(eager_grads)
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
def test_later_steps_with_new_draws_rates_and_schedules_do_not_recompile(name):
    case, compiled = eager_and_compiled(name)
    optimizer = torch.optim.AdamW([*case.model.parameters(), *case.objective.parameters()], lr=1e-3)
    losses = []
    for step in range(4):
        if case.objective.needs_progress:  # a schedule moves within its first phase
            case.objective.set_progress(TrainingProgress(100 * (step + 1), TOTAL_TOKENS))
        for group in optimizer.param_groups:
            group["lr"] = 1e-3 / (step + 1)
        with torch.compiler.set_stance("fail_on_recompile" if step else "default"):
            out, _ = loss_and_grads(compiled, case.batch, case.model, seed=step)
        optimizer.step()
        losses.append(float(out.loss.detach()))
    assert len(set(losses)) == len(losses)  # new draws and new weights each step: the graph is not a constant


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
    eager, eager_grads = loss_and_grads(lambda b: case.objective.loss(b, case.model, None), case.batch, case.model, 0)
    with torch.compiler.set_stance("default"):
        out, grads = loss_and_grads(compiled, case.batch, case.model, 0)
    torch.testing.assert_close(out.loss, eager.loss, rtol=1e-5, atol=1e-5)
    for key, grad in grads.items():
        torch.testing.assert_close(grad, eager_grads[key], rtol=1e-4, atol=1e-5, msg=key)
    assert out.forward_flops == eager.forward_flops
    with torch.compiler.set_stance("fail_on_recompile"):
        loss_and_grads(compiled, case.batch, case.model, 1)
