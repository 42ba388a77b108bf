"""Optimizers as the lectures teach them: hand-written update rules equal to torch.optim, torch's
foreach and fused kernels equal to its for-loop, the lectures' claims about how the optimizers
behave, a real training run, and the step time of each on a model of a few million parameters.

Precisions: mixed precision keeps fp32 master weights and optimizer state (test_devices.py:
autocast leaves the parameters fp32), so under ``fp16``/``bf16`` the optimizers step fp32
parameters with gradients rounded through that dtype, compared at fp32 tolerance. Comparing
them on half-precision parameters instead would say little: over 25 steps two correct
implementations (torch's own foreach and for-loop included) drift apart by up to 16 ulps of a
tensor's largest value in bf16 (measured here, lr up to 0.1), each about as far from the fp32
result, and in fp16 Adam's second moments of gradients below ~8e-3 are subnormal, where even
torch's fused and single-tensor Adam disagree by more than the values. ``fp32`` and ``tf32``
(a step has no matmul) are plain float32.
"""

from __future__ import annotations

import copy
import math
from inspect import signature
from typing import Any, Callable

import pytest
import torch
import torch.nn.functional as F
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pytest_hpml import Precision, assert_optimizer_matches
from suites import optimizers as hand
from suites.models import digits, linear_stack, mlp

Factory = Callable[..., torch.optim.Optimizer]

# The fixtures' values (a device, a precision) are immutable, so sharing them between examples
# is safe; 15 examples a case keep the suite within its CI budget.
EXAMPLES = settings(
    max_examples=15,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


def log_uniform(low: float, high: float) -> st.SearchStrategy[float]:
    return st.floats(math.log10(low), math.log10(high)).map(lambda e: 10.0**e)


def zero_or(strategy: st.SearchStrategy[float]) -> st.SearchStrategy[float]:
    """0.0 (the option switched off) or a value from ``strategy``."""
    return st.one_of(st.just(0.0), strategy)


LR = log_uniform(1e-4, 1e-1)
EPS = log_uniform(1e-8, 1e-4)
WEIGHT_DECAY = zero_or(log_uniform(1e-4, 1e-1))
# β1 from weak to heavy momentum, β2 in the range practitioners use.
BETAS = st.tuples(st.floats(0.5, 0.99), st.floats(0.9, 0.9999))
ADAM_LIKE = {"lr": LR, "betas": BETAS, "eps": EPS, "weight_decay": WEIGHT_DECAY}


@st.composite
def sgd_options(draw: st.DrawFn) -> dict[str, Any]:
    momentum = draw(zero_or(st.floats(0.1, 0.99)))
    nesterov = momentum > 0 and draw(st.booleans())  # Nesterov needs momentum, no dampening
    return {
        "lr": draw(LR),
        "momentum": momentum,
        "dampening": 0.0 if nesterov else draw(zero_or(st.floats(0.1, 0.9))),
        "nesterov": nesterov,
        "weight_decay": draw(WEIGHT_DECAY),
        "maximize": draw(st.booleans()),
    }


def options(**strategies: st.SearchStrategy[Any]) -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries({**strategies, "maximize": st.booleans()})


# name: (hand-written, its torch.optim twin, the hyperparameters to draw)
TWINS: dict[str, tuple[Factory, Factory, st.SearchStrategy[dict[str, Any]]]] = {
    "sgd": (hand.SGD, torch.optim.SGD, sgd_options()),
    "adagrad": (
        hand.Adagrad,
        torch.optim.Adagrad,
        options(
            lr=log_uniform(1e-3, 0.5),
            lr_decay=zero_or(log_uniform(1e-4, 0.1)),
            weight_decay=WEIGHT_DECAY,
            initial_accumulator_value=zero_or(log_uniform(1e-2, 1.0)),
            eps=log_uniform(1e-10, 1e-6),
        ),
    ),
    "adadelta": (
        hand.Adadelta,
        torch.optim.Adadelta,
        options(
            lr=log_uniform(1e-2, 1.0),
            rho=st.floats(0.5, 0.99),
            eps=log_uniform(1e-8, 1e-4),
            weight_decay=WEIGHT_DECAY,
        ),
    ),
    "rmsprop": (
        hand.RMSprop,
        torch.optim.RMSprop,
        options(
            lr=LR,
            alpha=st.floats(0.5, 0.999),
            eps=EPS,
            weight_decay=WEIGHT_DECAY,
            momentum=zero_or(st.floats(0.1, 0.99)),
            centered=st.booleans(),
        ),
    ),
    "adam": (hand.Adam, torch.optim.Adam, options(**ADAM_LIKE, amsgrad=st.booleans())),
    "adamw": (hand.AdamW, torch.optim.AdamW, options(**ADAM_LIKE, amsgrad=st.booleans())),
    "adamax": (hand.Adamax, torch.optim.Adamax, options(**ADAM_LIKE)),
    "nadam": (
        hand.NAdam,
        torch.optim.NAdam,
        options(**ADAM_LIKE, momentum_decay=log_uniform(1e-3, 1e-1)),
    ),
}


def dtypes(precision: Precision) -> dict[str, torch.dtype]:
    """fp32 master weights, and the gradients ``precision`` produces: see the module docstring."""
    return {"dtype": torch.float32, "grad_dtype": precision.dtype}


@pytest.mark.parametrize("name", TWINS)
@EXAMPLES
@given(data=st.data())
def test_hand_written_optimizer_matches_torch_optim(
    name: str, device: torch.device, precision: Precision, data: st.DataObject
) -> None:
    mine, theirs, strategy = TWINS[name]
    kwargs = data.draw(strategy, label="hyperparameters")
    assert_optimizer_matches(
        lambda p: mine(p, **kwargs),
        lambda p: theirs(p, foreach=False, **kwargs),  # the for-loop form, on every device
        device=device,
        **dtypes(precision),
    )


def fused_unsupported(optimizer: Factory, device: torch.device, dtype: torch.dtype) -> str | None:
    """Why torch has no fused ``optimizer`` for ``device`` and ``dtype``, or None when it has."""
    probe = torch.zeros(2, device=device, dtype=dtype, requires_grad=True)
    probe.grad = torch.ones_like(probe)
    try:
        optimizer([probe], fused=True).step()
    except (TypeError, RuntimeError) as error:  # no fused kwarg / not for this device or dtype
        return f"no fused {optimizer.__name__} on {device} for {dtype}: {error}"
    return None


# Every optimizer has a foreach form; some have a fused kernel too.
IMPLEMENTATIONS = [(name, "foreach") for name in TWINS] + [
    (name, "fused")
    for name, (_, theirs, _) in TWINS.items()
    if "fused" in signature(theirs).parameters
]


@pytest.mark.parametrize(("name", "implementation"), IMPLEMENTATIONS)
@EXAMPLES
@given(data=st.data())
def test_torch_foreach_and_fused_match_its_single_tensor_loop(
    name: str, implementation: str, device: torch.device, data: st.DataObject
) -> None:
    _, theirs, strategy = TWINS[name]
    reason = implementation == "fused" and fused_unsupported(theirs, device, torch.float32)
    if reason:
        pytest.skip(reason)
    kwargs = data.draw(strategy, label="hyperparameters")
    assert_optimizer_matches(
        lambda p: theirs(p, **{implementation: True}, **kwargs),
        lambda p: theirs(p, foreach=False, **kwargs),
        device=device,
    )


@EXAMPLES
@given(lr=LR, momentum=st.floats(0.1, 0.99))
def test_lecture_momentum_form_equals_torchs_for_a_constant_lr(
    lr: float, momentum: float, device: torch.device
) -> None:
    # v ← μv + lr·g; θ ← θ - v keeps lr times torch's v ← μv + g; θ ← θ - lr·v, step by step.
    assert_optimizer_matches(
        lambda p: hand.LectureMomentum(p, lr=lr, momentum=momentum),
        lambda p: torch.optim.SGD(p, lr=lr, momentum=momentum),
        device=device,
    )


# Adagrad's per-coordinate step lr_t / (√G + ε): G only grows, lr_t only shrinks.


def effective_steps(optimizer: Factory, grads: torch.Tensor, **kwargs: Any) -> torch.Tensor:
    """|Δθ| / |g| of each coordinate at each step (rows) for the gradient sequence ``grads``.

    float64, so that the subtraction recovering Δθ adds no noise a comparison could see.
    """
    param = torch.ones(grads.shape[1], dtype=torch.float64, requires_grad=True)
    opt = optimizer([param], **kwargs)
    ratios = []
    for grad in grads:
        before = param.detach().clone()
        param.grad = grad.clone()
        opt.step()
        ratios.append((param.detach() - before).abs() / grad.abs())
    return torch.stack(ratios)


def gradient_sequences() -> dict[str, torch.Tensor]:
    """Random gradients spanning four decades, and gradients that shrink a thousandfold."""
    gen = torch.Generator().manual_seed(0)
    random = torch.randn(60, 8, generator=gen, dtype=torch.float64)
    random *= 10.0 ** torch.empty(60, 8, dtype=torch.float64).uniform_(-3, 1, generator=gen)
    shrinking = torch.ones(60, 8, dtype=torch.float64)
    shrinking[20:] = 1e-3
    return {"random": random, "shrinking": shrinking}


@pytest.mark.parametrize("lr_decay", [0.0, 0.01])
@pytest.mark.parametrize("sequence", ["random", "shrinking"])
def test_adagrad_step_never_grows(sequence: str, lr_decay: float) -> None:
    ratios = effective_steps(
        torch.optim.Adagrad, gradient_sequences()[sequence], lr=0.1, lr_decay=lr_decay
    )
    grew = ratios[1:] > ratios[:-1] * (1 + 1e-9)  # 1e-9: rounding of Δθ in float64
    assert not grew.any(), f"the step grew at (step - 2, coordinate) {grew.nonzero()[0].tolist()}"


def test_rmsprop_step_grows_when_gradients_shrink() -> None:
    # The contrast that shows the measurement above can see growth: RMSprop forgets old
    # gradients, so once they shrink (after step 20) its step lr / √E[g²] grows at every step.
    ratios = effective_steps(torch.optim.RMSprop, gradient_sequences()["shrinking"], lr=0.01)
    assert (ratios[20:] > ratios[19:-1]).all()


# The lectures' badly scaled quadratic J = 100x² + y²: curvature 200 along x, 2 along y.
X_CURVATURE = 200.0
START = (1.0, 1.0)
TARGET = 1e-3  # loss to reach, from J = 101 at the start
STEP_LIMIT = 3000
# Stable for gradient descent (< 2/200), momentum 0.9 (< 2·1.9/200) and Nesterov 0.9
# (< 2·1.9/(2.8·200) ≈ 0.0068); above 1/200, where plain GD starts to overshoot along x.
SAME_LR = 0.004
LARGE_LR = 0.009  # above 1/200, so x overshoots; below 2/200, so it still converges


def quadratic(p: torch.Tensor) -> torch.Tensor:
    return X_CURVATURE / 2 * p[0] ** 2 + p[1] ** 2


def descend(optimizer: Factory, steps: int = STEP_LIMIT, **kwargs: Any) -> list[list[float]]:
    """(x, y, J) before each step and after the last, stopping at TARGET or divergence."""
    p = torch.tensor(START, dtype=torch.float64, requires_grad=True)
    opt = optimizer([p], **kwargs)
    path = []
    for _ in range(steps + 1):
        loss = quadratic(p)
        path.append([*p.tolist(), loss.item()])
        if loss.item() < TARGET or not loss.isfinite() or loss.item() > 1e6:
            break
        opt.zero_grad()
        loss.backward()
        opt.step()
    return path


def steps_to_target(optimizer: Factory, **kwargs: Any) -> float:
    """Steps until J < TARGET; infinity when it never gets there."""
    path = descend(optimizer, **kwargs)
    return len(path) - 1 if path[-1][2] < TARGET else math.inf


SGD = torch.optim.SGD
ACCELERATED = {
    "momentum": (SGD, {"momentum": 0.9}),
    "nesterov": (SGD, {"momentum": 0.9, "nesterov": True}),
}


@pytest.mark.parametrize("name", ACCELERATED)
def test_momentum_reaches_the_loss_in_fewer_steps_than_sgd_at_the_same_lr(name: str) -> None:
    optimizer, kwargs = ACCELERATED[name]
    plain = steps_to_target(SGD, lr=SAME_LR)
    accelerated = steps_to_target(optimizer, lr=SAME_LR, **kwargs)
    assert plain < math.inf, "plain SGD must converge at this lr"
    assert accelerated < plain


@pytest.mark.xfail(
    reason="lecture claim, not true here: Adam moves each coordinate by about lr per step "
    "whatever its curvature, so at an lr stable for SGD it crawls along y; its gain is that "
    "its lr may be far larger (next test)",
    strict=True,
)
def test_adam_reaches_the_loss_in_fewer_steps_than_sgd_at_the_same_lr() -> None:
    assert steps_to_target(torch.optim.Adam, lr=SAME_LR) < steps_to_target(SGD, lr=SAME_LR)


def test_adam_at_its_best_lr_needs_fewer_steps_than_sgd_at_its_best() -> None:
    grid = [10 ** (k / 4) for k in range(-12, 0)]  # 1e-3 to 0.56
    best_sgd = min(steps_to_target(SGD, lr=lr) for lr in grid)
    best_adam = min(steps_to_target(torch.optim.Adam, lr=lr) for lr in grid)
    assert best_sgd < math.inf
    assert best_adam < best_sgd


@pytest.mark.parametrize(
    ("lr", "alternates"),
    [(LARGE_LR, True), (SAME_LR, False)],
    ids=["above-1-over-curvature", "below-1-over-curvature"],
)
def test_sgd_with_a_large_lr_oscillates_along_x(lr: float, alternates: bool) -> None:
    # x ← (1 - 200 lr) x: the factor is negative once lr > 1/200, so x flips sign every step;
    # y ← (1 - 2 lr) y never does.
    path = descend(SGD, steps=50, lr=lr)
    xs, ys = [x for x, _, _ in path], [y for _, y, _ in path]
    flips = [a * b < 0 for a, b in zip(xs, xs[1:])]
    assert all(flips) if alternates else not any(flips)
    assert all(y > 0 for y in ys)


# A short real training run: every optimizer at least halves a small MLP's loss on the digits.
TRAINING: dict[str, tuple[Factory, dict[str, float]]] = {
    "sgd": (hand.SGD, {"lr": 0.1}),
    "momentum": (hand.SGD, {"lr": 0.05, "momentum": 0.9}),
    "nesterov": (hand.SGD, {"lr": 0.05, "momentum": 0.9, "nesterov": True}),
    "adagrad": (hand.Adagrad, {"lr": 0.05}),
    "adadelta": (hand.Adadelta, {"lr": 1.0}),
    "rmsprop": (hand.RMSprop, {"lr": 1e-3}),
    "adam": (hand.Adam, {"lr": 1e-2}),
    "adamw": (hand.AdamW, {"lr": 1e-2}),
    "adamax": (hand.Adamax, {"lr": 2e-2}),
    "nadam": (hand.NAdam, {"lr": 1e-2}),
}
TRAINING_STEPS = 60
BATCH = 128


def full_loss(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    with torch.no_grad():
        return F.cross_entropy(model(x), y).item()


@pytest.mark.parametrize("name", TRAINING)
def test_each_optimizer_halves_the_digits_loss_in_60_steps(
    name: str, device: torch.device, precision: Precision
) -> None:
    optimizer, kwargs = TRAINING[name]
    x, y = (t.to(device) for t in digits())
    model = mlp().to(device)
    opt = optimizer(model.parameters(), **kwargs)  # the hand-written one, proven equal above
    batches = torch.Generator().manual_seed(0)
    before = full_loss(model, x, y)
    for _ in range(TRAINING_STEPS):
        index = torch.randint(0, len(x), (BATCH,), generator=batches).to(device)
        with precision.autocast():
            logits = model(x[index])
        loss = F.cross_entropy(logits.float(), y[index])
        opt.zero_grad()
        loss.backward()
        opt.step()
    after = full_loss(model, x, y)
    assert after < before / 2, f"{name}: loss {before:.3f} -> {after:.3f}"


# Step time of torch's optimizers on 4.2M parameters in 32 tensors, and the speed-up of its
# foreach and fused implementations over the for-loop, measured in one run.
BENCHED: dict[str, tuple[Factory, dict[str, Any]]] = {
    "sgd-momentum": (torch.optim.SGD, {"lr": 1e-3, "momentum": 0.9}),
    "adam": (torch.optim.Adam, {"lr": 1e-3}),
    "adamw": (torch.optim.AdamW, {"lr": 1e-3}),
    "adagrad": (torch.optim.Adagrad, {"lr": 1e-2}),
    "rmsprop": (torch.optim.RMSprop, {"lr": 1e-3}),
}


def stepper(
    optimizer: Factory, kwargs: dict[str, Any], model: torch.nn.Module, implementation: str
) -> Callable[[], Any]:
    """``step`` of ``optimizer`` on a copy of ``model`` whose gradients are already there."""
    own = copy.deepcopy(model)
    gen = torch.Generator().manual_seed(0)
    for param in own.parameters():
        param.grad = (torch.randn(param.shape, generator=gen) * 1e-2).to(param.device)
    choice = {"foreach": False} if implementation == "single" else {implementation: True}
    return optimizer(own.parameters(), **kwargs, **choice).step


# A step streams every parameter, gradient and state tensor (tens of MB): memory-bound work,
# which the compute-bound reference workload tracks poorly (each round evicts its data from the
# caches). Between unchanged runs on the 2-core shared VM the times moved by up to ±25% in
# reference units and the in-run speed-ups by up to 14%, so the judged margins are wider than
# the 6% default; losing a fused kernel (a speed-up of ~3x falling to ~1x) still shows.
TIME_THRESHOLD = 0.3
SPEEDUP_TOLERANCE = 0.2


@pytest.mark.hpml_bench(threshold=TIME_THRESHOLD)
@pytest.mark.parametrize("name", BENCHED)
def test_optimizer_step_time_and_foreach_fused_speedup(
    name: str, benchmark: Any, device: torch.device
) -> None:
    optimizer, kwargs = BENCHED[name]
    model = linear_stack().to(device)
    names = ["single", "foreach"]
    if not fused_unsupported(optimizer, device, torch.float32):
        names.append("fused")
    targets = {impl: stepper(optimizer, kwargs, model, impl) for impl in names}
    benchmark.variants(targets, baseline="single", tolerance=SPEEDUP_TOLERANCE)
