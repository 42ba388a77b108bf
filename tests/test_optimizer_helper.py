"""``assert_optimizer_matches``: it passes for equal optimizers and, for the bugs people really
write, fails at the right step with a message that names the step, the parameter and the error.

Each deliberately wrong optimizer here differs from its reference in one way only. The second
half tests optimizers a model builds for itself (``TinyGPT.configure_optimizers``, nanoGPT's
weight-decay and no-decay groups chosen by parameter name) on a real, small torch model.
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
    assert message.startswith("optimizers differ at step 1 of 25: param[0] ")
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
    assert message.startswith("optimizers differ at step 1 of 25: param[0] ")


def test_adam_with_l2_decay_is_not_adamw() -> None:
    # Weight decay added to the gradient (so scaled by Adam's denominator), not to the weights.
    message = failure(
        lambda p: Adam(p, lr=1e-3, weight_decay=0.1),
        lambda p: torch.optim.AdamW(p, lr=1e-3, weight_decay=0.1),
    )
    assert message.startswith("optimizers differ at step 1 of 25: param[0] ")


def test_a_bug_that_only_shows_on_non_square_weights_is_caught_by_the_default_shapes() -> None:
    transposed = lambda p: FanInSGD(p, transposed=True)  # noqa: E731
    assert_optimizer_matches(transposed, FanInSGD, params=[(4, 4), (4,)])
    message = failure(transposed, FanInSGD)
    assert message.startswith("optimizers differ at step 1 of 25: param[0] (shape (7, 4),")


def test_state_under_the_same_name_is_compared_unless_switched_off() -> None:
    mislabelled = lambda p: CorrectedStateAdam(p, lr=1e-3)  # noqa: E731
    message = failure(mislabelled, torch_adam, steps=1)
    assert message.startswith("optimizers differ at step 1 of 1: state 'exp_avg' of param[0] ")
    assert_optimizer_matches(mislabelled, torch_adam, steps=1, compare_state=False)


def test_nan_never_matches() -> None:
    nan_lr = lambda p: torch.optim.SGD(p, lr=math.nan)  # noqa: E731
    message = failure(nan_lr, lambda p: torch.optim.SGD(p), compare_groups=False)
    assert "candidate nan" in message
    # Equal settings, NaN included, pass the group check: the first step shows the NaN.
    assert "candidate nan" in failure(nan_lr, nan_lr)


def test_given_tolerances_are_used_and_reported() -> None:
    # The lr differs on purpose, so the group check that would report it first is switched off.
    wrong = lambda p: SGD(p, lr=0.0101)  # noqa: E731
    right = lambda p: torch.optim.SGD(p, lr=0.01)  # noqa: E731
    assert_optimizer_matches(wrong, right, rtol=0.0, atol=0.1, compare_groups=False)
    message = failure(wrong, right, rtol=1e-4, atol=1e-4, compare_groups=False)
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


# Tensor form: the parameters each optimizer holds and its param groups, checked before stepping.


def test_a_different_hyperparameter_is_reported_before_any_step() -> None:
    message = failure(lambda p: SGD(p, lr=0.0101), lambda p: torch.optim.SGD(p, lr=0.01))
    assert message.startswith("param groups differ before the first step:\n")
    assert "param group 0: lr 0.0101 (candidate) != 0.01 (reference)" in message


def test_hyperparameters_equal_up_to_float_rounding_are_equal() -> None:
    # 0.1 * 0.01 is 0.0010000000000000002: the same lr, computed.
    assert_optimizer_matches(
        lambda p: torch.optim.AdamW(p, lr=0.1 * 0.01), lambda p: torch.optim.AdamW(p, lr=1e-3)
    )
    message = failure(
        lambda p: torch.optim.AdamW(p, lr=1e-3 * (1 + 1e-9)),
        lambda p: torch.optim.AdamW(p, lr=1e-3),
    )
    assert "param group 0: lr 0.001000000001 (candidate) != 0.001 (reference)" in message


def test_a_foreign_tensor_in_the_tensor_form_is_reported() -> None:
    def foreign(p: Params) -> torch.optim.Optimizer:
        return torch.optim.SGD([*p, torch.zeros(3, requires_grad=True)])

    message = failure(foreign, torch.optim.SGD)
    assert message.startswith("the candidate optimizer does not hold the parameters it was given")
    assert message.endswith(
        "given: it holds 1 tensor that is not among the parameters it was given"
    )


def test_a_parameter_left_out_in_the_tensor_form_is_named() -> None:
    message = failure(lambda p: torch.optim.SGD(list(p)[1:]), torch.optim.SGD)
    assert message == (
        "the candidate optimizer does not hold the parameters it was given: param[0] is missing"
    )


# Model form: a real GPT-like model that builds its own optimizer, as nanoGPT does.


class Block(torch.nn.Module):
    """A residual MLP block: LayerNorm, then a Linear layer with a bias."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.ln = torch.nn.LayerNorm(width)
        self.fc = torch.nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + torch.relu(self.fc(self.ln(x)))


class TinyGPT(torch.nn.Module):
    """nanoGPT's layout and parameter names in miniature, the embedding tied to the lm_head."""

    def __init__(self, vocab: int = 11, width: int = 8, depth: int = 2) -> None:
        super().__init__()
        self.transformer = torch.nn.ModuleDict(
            {
                "wte": torch.nn.Embedding(vocab, width),
                "h": torch.nn.ModuleList(Block(width) for _ in range(depth)),
                "ln_f": torch.nn.LayerNorm(width),
            }
        )
        self.lm_head = torch.nn.Linear(width, vocab, bias=False)
        self.transformer.wte.weight = self.lm_head.weight  # tied, as in GPT-2
        # LayerNorm starts at ones and zeros, where decaying the zeros changes nothing.
        with torch.no_grad():
            for module in self.modules():
                if isinstance(module, torch.nn.LayerNorm):
                    module.weight.uniform_(0.5, 1.5)
                    module.bias.uniform_(-0.5, 0.5)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.transformer.wte(idx)
        for block in self.transformer.h:
            x = block(x)
        return self.lm_head(self.transformer.ln_f(x))

    def configure_optimizers(self, weight_decay: float, lr: float) -> torch.optim.AdamW:
        """AdamW decaying matrices and embeddings (2-D and more), not biases nor LayerNorms."""
        named = {name: p for name, p in self.named_parameters() if p.requires_grad}
        decay = [p for name, p in named.items() if p.dim() >= 2]
        no_decay = [p for name, p in named.items() if p.dim() < 2]
        groups = [
            {"params": decay, "weight_decay": weight_decay},
            {"params": no_decay, "weight_decay": 0.0},
        ]
        return torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.95))


DECAYED = ["transformer.wte.weight", "transformer.h.0.fc.weight", "transformer.h.1.fc.weight"]
NOT_DECAYED = [
    *(f"transformer.h.{i}.{name}" for i in (0, 1) for name in ("ln.weight", "ln.bias", "fc.bias")),
    "transformer.ln_f.weight",
    "transformer.ln_f.bias",
]
LAYER_NORM_WEIGHTS = ["transformer.h.0.ln.weight", "transformer.h.1.ln.weight"]


def named(model: Any) -> dict[str, torch.Tensor]:
    """A model's parameters by name, whether it is a module or already a mapping."""
    if isinstance(model, torch.nn.Module):
        return dict(model.named_parameters())
    return dict(model)


def explicit_groups(
    model: Any, decayed: list[str] = DECAYED, weight_decay: float = 0.1
) -> list[dict[str, Any]]:
    params = named(model)
    rest = [name for name in params if name not in decayed]
    return [
        {"params": [params[name] for name in decayed], "weight_decay": weight_decay},
        {"params": [params[name] for name in rest], "weight_decay": 0.0},
    ]


def explicit_adamw(model: Any) -> torch.optim.Optimizer:
    """The reference: the groups written out by name."""
    return torch.optim.AdamW(explicit_groups(model), lr=1e-3, betas=(0.9, 0.95))


def configured(model: Any) -> torch.optim.Optimizer:
    return model.configure_optimizers(weight_decay=0.1, lr=1e-3)


def snapshot(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {name: p.detach().clone() for name, p in model.named_parameters()}


def test_reference_groups_name_every_parameter_of_the_model() -> None:
    assert sorted(DECAYED + NOT_DECAYED) == sorted(named(TinyGPT()))


def test_configure_optimizers_matches_explicit_groups_on_copies_of_the_model() -> None:
    model = TinyGPT()
    before = snapshot(model)
    given: list[torch.nn.Module] = []

    def candidate(copy: torch.nn.Module) -> torch.optim.Optimizer:
        given.append(copy)
        return copy.configure_optimizers(weight_decay=0.1, lr=1e-3)

    def reference(copy: torch.nn.Module) -> torch.optim.Optimizer:
        given.append(copy)
        return explicit_adamw(copy)

    assert_optimizer_matches(candidate, reference, model=model)
    assert all(isinstance(copy, TinyGPT) for copy in given)
    assert len({id(copy) for copy in [model, *given]}) == 3, "each side gets its own copy"
    assert all(torch.equal(before[name], p) for name, p in model.named_parameters())
    stepped = dict(given[0].named_parameters())
    assert not torch.equal(stepped["transformer.wte.weight"], before["transformer.wte.weight"])


def test_an_optimizer_built_from_another_model_is_reported_before_any_step() -> None:
    other = TinyGPT()
    message = failure(lambda m: configured(other), explicit_adamw, model=TinyGPT())
    assert message.startswith(
        "the candidate optimizer does not hold the parameters it was given: "
        "transformer.wte.weight, transformer.h.0.ln.weight, "
    )
    assert "are missing" in message
    assert (
        "(it holds 11 tensors that are not parameters of its copy of the model"
        " — was it built from another model?)"
    ) in message
    assert "step" not in message


def test_an_optimizer_built_from_the_model_passed_in_is_told_to_use_its_copy() -> None:
    model = TinyGPT()
    message = failure(explicit_adamw, lambda m: configured(model), model=model)
    assert message.startswith("the reference optimizer does not hold the parameters it was given")
    assert message.endswith(
        "(it holds 11 tensors that are not parameters of its copy of the model but of the model "
        "passed as model= — build the optimizer from the copy the factory is given)"
    )


def test_a_parameter_left_out_of_the_optimizer_is_named() -> None:
    def without_final_bias(model: torch.nn.Module) -> torch.optim.Optimizer:
        optimizer = explicit_adamw(model)
        optimizer.param_groups[1]["params"].pop()  # the last no-decay parameter
        return optimizer

    message = failure(without_final_bias, configured, model=TinyGPT())
    assert message == (
        "the candidate optimizer does not hold the parameters it was given: "
        "transformer.ln_f.bias is missing"
    )


@pytest.mark.filterwarnings("ignore:optimizer contains a parameter group with duplicate")
def test_a_tied_weight_listed_twice_is_named() -> None:
    # Listing weights module by module lists the tied embedding and lm_head weight twice.
    def by_module(model: TinyGPT) -> torch.optim.Optimizer:
        blocks = model.transformer.h
        decayed = [
            model.transformer.wte.weight,
            *(block.fc.weight for block in blocks),
            model.lm_head.weight,
        ]
        rest = [p for p in model.parameters() if p.dim() < 2]
        groups = [{"params": decayed, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}]
        return torch.optim.AdamW(groups, lr=1e-3, betas=(0.9, 0.95))

    message = failure(by_module, configured, model=TinyGPT())
    assert message == (
        "the candidate optimizer does not hold the parameters it was given: "
        "transformer.wte.weight is held 2 times"
    )


def test_a_different_weight_decay_in_one_group_is_reported_with_both_values() -> None:
    # The no-decay group without its own weight_decay gets AdamW's default, 0.01.
    def default_decay_everywhere(model: Any) -> torch.optim.Optimizer:
        decayed, rest = explicit_groups(model)
        del rest["weight_decay"]
        return torch.optim.AdamW([decayed, rest], lr=1e-3, betas=(0.9, 0.95))

    message = failure(default_decay_everywhere, configured, model=TinyGPT())
    assert message == (
        "param groups differ before the first step:\n"
        "param group 1: weight_decay 0.01 (candidate) != 0.0 (reference)"
    )


def test_a_different_number_of_groups_is_reported() -> None:
    def one_group(model: TinyGPT) -> torch.optim.Optimizer:
        return torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.95), weight_decay=0.1)

    message = failure(configured, one_group, model=TinyGPT())
    assert "the candidate has 2 param groups, the reference has 1" in message


def test_a_layer_norm_weight_in_the_decayed_group_is_named() -> None:
    # Decaying every ".weight" by name decays the LayerNorm weights too.
    def by_suffix(model: TinyGPT) -> torch.optim.Optimizer:
        weights = [name for name in named(model) if name.endswith(".weight")]
        groups = explicit_groups(model, decayed=weights)
        return torch.optim.AdamW(groups, lr=1e-3, betas=(0.9, 0.95))

    message = failure(by_suffix, configured, model=TinyGPT())
    wrongly = ", ".join([*LAYER_NORM_WEIGHTS, "transformer.ln_f.weight"])
    assert message == (
        "param groups differ before the first step:\n"
        f"param group 0: candidate holds {wrongly}, reference does not\n"
        f"param group 1: reference holds {wrongly}, candidate does not"
    )


class BiasedAdamW(torch.optim.AdamW):
    """AdamW that also moves the parameters of its last group by a constant: a stray bias."""

    @torch.no_grad()
    def step(self, closure: Any = None) -> Any:
        loss = super().step(closure)
        for param in self.param_groups[-1]["params"]:
            param.add_(1e-3)
        return loss


class HalfLrLastGroupAdamW(torch.optim.AdamW):
    """AdamW that steps its last group at half the lr its param group says."""

    def step(self, closure: Any = None) -> Any:
        group = self.param_groups[-1]
        lr = group["lr"]
        group["lr"] = lr / 2
        try:
            return super().step(closure)
        finally:
            group["lr"] = lr


@pytest.mark.parametrize("kind", [BiasedAdamW, HalfLrLastGroupAdamW], ids=["bias", "half-lr"])
def test_a_numeric_difference_names_the_parameter(kind: Any) -> None:
    def candidate(model: Any) -> torch.optim.Optimizer:
        return kind(explicit_groups(model), lr=1e-3, betas=(0.9, 0.95))

    message = failure(candidate, configured, model=TinyGPT())
    # The first no-decay parameter in the model's order.
    assert message.startswith(
        "optimizers differ at step 1 of 25: transformer.h.0.ln.weight (shape (8,), torch.float32)"
    )
    assert f"candidate: tests.test_optimizer_helper.{kind.__name__}" in message


def test_a_named_parameters_mapping_works_like_the_model() -> None:
    model = TinyGPT()
    before = snapshot(model)
    given: list[Any] = []

    def by_dimension(params: Any) -> torch.optim.Optimizer:
        given.append(params)
        decayed = [name for name, p in params.items() if p.dim() >= 2]
        groups = explicit_groups(params, decayed=decayed)
        return torch.optim.AdamW(groups, lr=1e-3, betas=(0.9, 0.95))

    parameters = dict(model.named_parameters())
    assert_optimizer_matches(by_dimension, explicit_adamw, model=parameters)
    assert list(given[0]) == list(parameters)
    assert given[0]["transformer.wte.weight"] is not parameters["transformer.wte.weight"]
    assert all(torch.equal(before[name], p) for name, p in model.named_parameters())

    message = failure(lambda m: explicit_adamw(TinyGPT()), explicit_adamw, model=parameters)
    assert message.startswith(
        "the candidate optimizer does not hold the parameters it was given: transformer.wte.weight,"
    )
    assert "transformer.ln_f.weight, ... (1 more) are missing (it holds 11 tensors" in message


def test_both_sides_get_the_same_gradients_by_name_in_each_parameters_dtype() -> None:
    seen: dict[str, list[dict[str, torch.Tensor]]] = {"candidate": [], "reference": []}

    def recording(role: str) -> Any:
        def factory(model: TinyGPT) -> torch.optim.Optimizer:
            optimizer = configured(model)
            names = {id(p): name for name, p in model.named_parameters()}

            def record(opt: Any, *_: Any) -> None:
                held = [p for group in opt.param_groups for p in group["params"]]
                seen[role].append({names[id(p)]: p.grad.clone() for p in held})

            optimizer.register_step_pre_hook(record)
            return optimizer

        return factory

    model = TinyGPT().double()
    assert_optimizer_matches(recording("candidate"), recording("reference"), model=model, steps=3)
    assert len(seen["candidate"]) == 3
    for mine, theirs in zip(seen["candidate"], seen["reference"]):
        assert mine.keys() == theirs.keys() == set(DECAYED + NOT_DECAYED)
        assert all(torch.equal(mine[name], theirs[name]) for name in mine)
        assert all(g.dtype == torch.float64 for g in mine.values())
    first = seen["candidate"][0]
    assert not torch.equal(first["transformer.h.0.ln.bias"], first["transformer.h.1.ln.bias"])


def test_model_and_params_are_exclusive() -> None:
    with pytest.raises(ValueError, match="either model or params"):
        assert_optimizer_matches(configured, configured, model=TinyGPT(), params=[(2, 2)])


@pytest.mark.parametrize("form", ["module", "mapping"])
def test_the_copies_are_converted_to_a_given_dtype_and_the_model_is_not(form: str) -> None:
    model = TinyGPT()
    seen: list[torch.dtype] = []

    def recording(copy: Any) -> torch.optim.Optimizer:
        seen.extend(p.dtype for p in named(copy).values())
        return explicit_adamw(copy)

    given = model if form == "module" else dict(model.named_parameters())
    assert_optimizer_matches(recording, explicit_adamw, model=given, dtype=torch.float64, steps=2)
    assert set(seen) == {torch.float64}
    assert {p.dtype for p in model.parameters()} == {torch.float32}


def test_a_frozen_parameter_is_not_required_but_is_named_where_held() -> None:
    model = TinyGPT()
    model.transformer.ln_f.bias.requires_grad_(False)
    assert_optimizer_matches(configured, configured, model=model, steps=2)
    # Holding a frozen parameter of its own copy is no error; holding it where the other does
    # not is a difference of group members.
    message = failure(configured, explicit_adamw, model=model)
    assert message == (
        "param groups differ before the first step:\n"
        "param group 1: reference holds transformer.ln_f.bias, candidate does not"
    )
