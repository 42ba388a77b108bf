"""``assert_optimizer_matches``: it passes for equal optimizers and, for the bugs people really
write, fails at the right step with a message that names the step, the parameter and the error.

Each deliberately wrong optimizer here differs from its reference in one way only.
"""

from __future__ import annotations

import math
import re
from typing import Any

import pytest
import torch

from pytest_hpml import Precision, assert_optimizer_matches
from suites.optimizers import SGD, Adam, Rule, ema

Params = Any


class AdamCorrectedFor(Rule):
    """Adam that bias-corrects m and v only for the first ``corrected_steps`` steps."""

    def __init__(self, params: Params, corrected_steps: int, lr: float = 1e-3) -> None:
        super().__init__(params, {"lr": lr, "betas": (0.9, 0.999), "eps": 1e-8})
        self.corrected_steps = corrected_steps

    def update(self, param: Any, grad: Any, state: dict[str, Any], group: dict[str, Any]) -> None:
        (beta1, beta2), t = group["betas"], state["step"]
        m = state["exp_avg"] = ema(state.get("exp_avg"), grad, beta1)
        v = state["exp_avg_sq"] = ema(state.get("exp_avg_sq"), grad * grad, beta2)
        if t <= self.corrected_steps:
            m, v = m / (1 - beta1**t), v / (1 - beta2**t)
        param.sub_(group["lr"] * m / (v.sqrt() + group["eps"]))


class AveragedMomentumSGD(Rule):
    """Momentum as an average, v ← μv + (1 - μ)g from v = 0: not torch's v ← μv + g."""

    def __init__(self, params: Params, lr: float, momentum: float) -> None:
        super().__init__(params, {"lr": lr, "momentum": momentum})

    def update(self, param: Any, grad: Any, state: dict[str, Any], group: dict[str, Any]) -> None:
        state["momentum_buffer"] = ema(state.get("momentum_buffer"), grad, group["momentum"])
        param.sub_(group["lr"] * state["momentum_buffer"])


class FanInSGD(Rule):
    """SGD with the step of a weight scaled by 1/√fan-in (elements feeding one output).

    ``transposed`` reads the fan-in from the wrong end of the shape, as if the weight were stored
    (in, out): the same number for a square matrix, a wrong one otherwise.
    """

    def __init__(self, params: Params, lr: float = 0.1, transposed: bool = False) -> None:
        super().__init__(params, {"lr": lr})
        self.transposed = transposed

    def update(self, param: Any, grad: Any, state: dict[str, Any], group: dict[str, Any]) -> None:
        fan_in = 1
        if param.dim() > 1:
            fan_in = param.numel() // param.shape[-1 if self.transposed else 0]
        param.sub_(group["lr"] / math.sqrt(fan_in) * grad)


class CorrectedStateAdam(Adam):
    """Adam that stores its bias-corrected first moment under torch's name for the raw one."""

    def update(self, param: Any, grad: Any, state: dict[str, Any], group: dict[str, Any]) -> None:
        super().update(param, grad, state, group)
        state["exp_avg"] = state["exp_avg"] / (1 - group["betas"][0] ** state["step"])


class ClosureOnly(torch.optim.SGD):
    """An optimizer whose step, like LBFGS's, cannot be called without a closure."""

    def step(self, closure: Any) -> Any:  # type: ignore[override]
        return super().step(closure)


def failure(candidate: Any, reference: Any, **kwargs: Any) -> str:
    """The AssertionError message of a comparison that must fail."""
    with pytest.raises(AssertionError) as raised:
        assert_optimizer_matches(candidate, reference, **kwargs)
    return str(raised.value)


def torch_adam(p: Params) -> torch.optim.Optimizer:
    return torch.optim.Adam(p, lr=1e-3, foreach=False)


@pytest.mark.parametrize("implementation", ["foreach", "fused"])
def test_passes_for_torch_adam_against_its_own_foreach_and_fused_forms(
    implementation: str,
) -> None:
    assert_optimizer_matches(lambda p: torch.optim.Adam(p, **{implementation: True}), torch_adam)


def test_passes_for_equal_optimizers_given_as_device_string_and_precision() -> None:
    assert_optimizer_matches(
        lambda p: Adam(p, lr=1e-3),
        torch_adam,
        device="cpu",
        dtype=Precision("fp32", torch.device("cpu")),
    )


def test_half_precision_defaults_accept_torchs_own_rounding_differences() -> None:
    # torch's fused kernel rounds once where its for-loop rounds after every op.
    fused = lambda p: torch.optim.Adam(p, fused=True)  # noqa: E731
    failure(fused, torch_adam, dtype=torch.bfloat16, rtol=1e-6, atol=1e-6)
    assert_optimizer_matches(fused, torch_adam, dtype=torch.bfloat16)


def test_missing_bias_correction_fails_at_the_first_step_with_a_full_message() -> None:
    message = failure(lambda p: AdamCorrectedFor(p, corrected_steps=0), torch_adam)
    assert message.startswith("optimizers differ at step 1 of 25: parameter 0 ")
    assert "(shape (7, 4), torch.float32)" in message
    largest = re.search(r"largest absolute error (\S+), largest relative error (\S+)", message)
    assert largest, message
    assert float(largest[1]) > 1e-5
    assert float(largest[2]) > 1.3e-6
    assert re.search(r"furthest outside the tolerance: index \(\d, \d\), candidate \S+", message)
    assert "tolerance: rtol=1.3e-06, atol=1e-05 (default for torch.float32)" in message
    assert "candidate: tests.test_optimizer_helper.AdamCorrectedFor" in message
    assert "reference: torch.optim.adam.Adam; device cpu, seed 0" in message


def test_an_error_appearing_only_after_step_10_is_caught_at_step_11() -> None:
    late = AdamCorrectedFor
    assert_optimizer_matches(lambda p: late(p, corrected_steps=10), torch_adam, steps=10)
    message = failure(lambda p: late(p, corrected_steps=10), torch_adam)
    assert message.startswith("optimizers differ at step 11 of 25:")


def test_momentum_as_an_average_is_not_torchs_momentum() -> None:
    message = failure(
        lambda p: AveragedMomentumSGD(p, lr=0.01, momentum=0.9),
        lambda p: torch.optim.SGD(p, lr=0.01, momentum=0.9),
    )
    assert message.startswith("optimizers differ at step 1 of 25: parameter 0 ")


def test_adam_with_l2_decay_is_not_adamw() -> None:
    # Weight decay added to the gradient (so scaled by Adam's denominator), not to the weights.
    message = failure(
        lambda p: Adam(p, lr=1e-3, weight_decay=0.1),
        lambda p: torch.optim.AdamW(p, lr=1e-3, weight_decay=0.1),
    )
    assert message.startswith("optimizers differ at step 1 of 25: parameter 0 ")


def test_a_bug_that_only_shows_on_non_square_weights_is_caught_by_the_default_shapes() -> None:
    transposed = lambda p: FanInSGD(p, transposed=True)  # noqa: E731
    assert_optimizer_matches(transposed, FanInSGD, params=[(4, 4), (4,)])
    message = failure(transposed, FanInSGD)
    assert message.startswith("optimizers differ at step 1 of 25: parameter 0 (shape (7, 4),")


def test_state_under_the_same_name_is_compared_unless_switched_off() -> None:
    mislabelled = lambda p: CorrectedStateAdam(p, lr=1e-3)  # noqa: E731
    message = failure(mislabelled, torch_adam, steps=1)
    assert message.startswith("optimizers differ at step 1 of 1: state 'exp_avg' of parameter 0 ")
    assert_optimizer_matches(mislabelled, torch_adam, steps=1, compare_state=False)


def test_nan_never_matches() -> None:
    message = failure(lambda p: torch.optim.SGD(p, lr=math.nan), lambda p: torch.optim.SGD(p))
    assert "candidate nan" in message


def test_given_tolerances_are_used_and_reported() -> None:
    wrong = lambda p: SGD(p, lr=0.0101)  # noqa: E731
    assert_optimizer_matches(wrong, lambda p: torch.optim.SGD(p, lr=0.01), rtol=0.0, atol=0.1)
    message = failure(wrong, lambda p: torch.optim.SGD(p, lr=0.01), rtol=1e-4, atol=1e-4)
    assert "tolerance: rtol=0.0001, atol=0.0001 (given)" in message


def test_gradients_are_rounded_through_grad_dtype() -> None:
    seen: list[torch.Tensor] = []

    def recording(p: Params) -> torch.optim.Optimizer:
        opt = torch.optim.SGD(p)
        opt.register_step_pre_hook(lambda o, *_: seen.extend(q.grad.clone() for q in p))
        return opt

    assert_optimizer_matches(recording, torch.optim.SGD, steps=3, grad_dtype=torch.bfloat16)
    assert all(g.dtype == torch.float32 for g in seen)
    assert all(torch.equal(g, g.bfloat16().float()) for g in seen)
    magnitudes = torch.cat([g.abs().flatten() for g in seen])
    assert magnitudes.max() / magnitudes.min() > 1e3, "gradients should span several decades"


@pytest.mark.parametrize(
    "closure_based", [torch.optim.LBFGS, ClosureOnly], ids=["lbfgs", "step-needs-closure"]
)
def test_closure_based_optimizers_are_refused_with_a_clear_error(closure_based: Any) -> None:
    with pytest.raises(TypeError, match=r"needs a closure.*out of scope"):
        assert_optimizer_matches(closure_based, torch_adam)


def test_a_factory_must_return_an_optimizer() -> None:
    with pytest.raises(TypeError, match=r"reference factory must return a torch\.optim\.Optimizer"):
        assert_optimizer_matches(torch_adam, lambda p: list(p))
