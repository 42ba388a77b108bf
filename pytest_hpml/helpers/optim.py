"""Step-by-step equivalence of two optimizers: :func:`assert_optimizer_matches`.

Both optimizers start from the same parameters and receive the same gradients, step after step;
parameters (and state both expose under the same name) are compared after every step. Loaded
only on first use of ``pytest_hpml.assert_optimizer_matches``, so importing torch here is free
for everyone else.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Callable, Union

import torch

OptimizerFactory = Callable[[Iterable[torch.Tensor]], torch.optim.Optimizer]
ParamLike = Union[Sequence[int], torch.Tensor]

# Non-square 2-D, 1-D and conv-like 4-D: a bug that mixes up dimensions or only touches matrices
# shows on one of them. Small, so that many steps stay cheap.
DEFAULT_SHAPES: tuple[tuple[int, ...], ...] = ((7, 4), (4,), (5, 3, 3, 3))
# Enough steps for bias corrections, accumulators and momentum warm-up to stop hiding a bug.
DEFAULT_STEPS = 25
# (rtol, atol): torch.testing.assert_close's defaults.
TOLERANCES: dict[torch.dtype, tuple[float, float]] = {
    torch.float64: (1e-7, 1e-7),
    torch.float32: (1.3e-6, 1e-5),
}
# Half precisions: two correct implementations round in a different order (one op at a time, or
# once in a fused kernel) and each step starts from the other's rounded values, so they drift
# apart by several ulps of the *operands*: where values cancel (p - lr * g, an EMA of gradients
# of both signs) the result's own ulp is far smaller. So the default accepts 8 ulps of each
# element plus 8 ulps of the tensor's largest magnitude (atol = rtol * max|reference|). Measured
# over 25 steps in bf16 with lr up to 0.1: torch's foreach and for-loop forms drift apart by a
# median 1-4 and up to 16 such ulps. A tight check compares fp32 master weights (grad_dtype).
HALF_RTOL: dict[torch.dtype, float] = {torch.bfloat16: 8 * 2.0**-7, torch.float16: 8 * 2.0**-10}
# Gradient elements are ±10**u with u uniform in this range: four decades, and for float16 the
# three whose squares stay normal float16 numbers (Adam-style second moments square them).
MAGNITUDES: dict[torch.dtype, tuple[float, float]] = {torch.float16: (-2.0, 1.0)}
DEFAULT_MAGNITUDES = (-3.0, 1.0)


@dataclass(frozen=True)
class Tolerance:
    """Elementwise |candidate - reference| <= atol + rtol * |reference|."""

    rtol: float
    atol: float | None  # None: rtol * the reference tensor's largest magnitude
    source: str  # "given", or the dtype whose default it is

    @classmethod
    def for_dtype(cls, dtype: torch.dtype, rtol: float | None, atol: float | None) -> Tolerance:
        given = rtol is not None or atol is not None
        source = "given" if given else f"default for {dtype}"
        if dtype in HALF_RTOL:
            default_rtol, default_atol = HALF_RTOL[dtype], None
        else:
            default_rtol, default_atol = TOLERANCES.get(dtype, TOLERANCES[torch.float32])
        return cls(
            default_rtol if rtol is None else rtol,
            default_atol if atol is None else atol,
            source,
        )

    def atol_for(self, reference: torch.Tensor) -> float:
        if self.atol is not None:
            return self.atol
        return self.rtol * float(reference.abs().max()) if reference.numel() else 0.0

    def __str__(self) -> str:
        atol = f"{self.atol:g}" if self.atol is not None else "rtol * max|reference|"
        return f"rtol={self.rtol:g}, atol={atol} ({self.source})"


def assert_optimizer_matches(
    candidate: OptimizerFactory,
    reference: OptimizerFactory,
    *,
    steps: int = DEFAULT_STEPS,
    params: Sequence[ParamLike] | None = None,
    device: str | torch.device = "cpu",
    dtype: Any = torch.float32,
    rtol: float | None = None,
    atol: float | None = None,
    seed: int = 0,
    grad_dtype: torch.dtype | None = None,
    compare_state: bool = True,
) -> None:
    """Assert that ``candidate`` updates parameters as ``reference`` does, step after step.

    ``candidate`` and ``reference`` take an iterable of parameters and return a
    ``torch.optim.Optimizer`` (e.g. ``lambda p: torch.optim.Adam(p, lr=1e-3)``). Both start from
    the same parameters (``params``: shapes, drawn from ``seed``, or tensors whose values are
    used) in ``dtype`` on ``device`` (``dtype`` may also be a ``pytest_hpml.Precision``) and get
    the same gradients: random signs, magnitudes spanning several decades, rounded through
    ``grad_dtype`` when given (float16 gradients reaching float32 master weights, as under
    mixed precision). After every step the parameters are compared, then, with
    ``compare_state``, every state entry both optimizers hold under the same key as tensors of
    the same shape. The first difference beyond ``rtol``/``atol`` (defaults follow the dtype)
    raises an AssertionError naming the step, the parameter (index, shape) or state key, the
    largest absolute and relative errors and the tolerance. Closure-based optimizers (LBFGS)
    raise a TypeError.
    """
    if steps < 1:
        raise ValueError(f"steps must be at least 1, got {steps}")
    device, dtype = torch.device(device), _dtype(dtype)
    tolerance = Tolerance.for_dtype(dtype, rtol, atol)
    start = _start(params, device, dtype, seed)
    sides = {
        "candidate": _side(candidate, start, "candidate"),
        "reference": _side(reference, start, "reference"),
    }
    grads = _gradients([t.shape for t in start], dtype, grad_dtype or dtype, seed)
    for step in range(1, steps + 1):
        step_grads = [g.to(device) for g in next(grads)]
        for tensors, optimizer in sides.values():
            for tensor, grad in zip(tensors, step_grads):
                tensor.grad = grad.clone()  # a copy each: an optimizer may write to its grad
            optimizer.step()
        problem = _first_difference(sides, tolerance, compare_state)
        if problem:
            raise AssertionError(
                f"optimizers differ at step {step} of {steps}: {problem}\n"
                f"tolerance: {tolerance}\n"
                f"candidate: {_name(sides['candidate'][1])}, reference: "
                f"{_name(sides['reference'][1])}; device {device}, seed {seed}"
            )


def _side(
    factory: OptimizerFactory, start: list[torch.Tensor], role: str
) -> tuple[list[torch.Tensor], torch.optim.Optimizer]:
    """Fresh parameters equal to ``start`` and the optimizer ``factory`` makes for them."""
    tensors = [t.clone().requires_grad_() for t in start]
    return tensors, _build(factory, tensors, role)


def _dtype(value: Any) -> torch.dtype:
    """A torch dtype, or the ``dtype`` of a ``pytest_hpml.Precision``."""
    dtype = value if isinstance(value, torch.dtype) else getattr(value, "dtype", None)
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise TypeError(f"dtype must be a floating-point torch.dtype or a Precision, got {value!r}")
    return dtype


def _start(
    params: Sequence[ParamLike] | None, device: torch.device, dtype: torch.dtype, seed: int
) -> list[torch.Tensor]:
    """The starting parameters: given tensors' values, or standard normal values of each shape."""
    generator = torch.Generator().manual_seed(seed)
    start = []
    for spec in DEFAULT_SHAPES if params is None else params:
        if isinstance(spec, torch.Tensor):
            values = spec.detach()
        else:
            values = torch.randn(tuple(spec), generator=generator)
        start.append(values.to(device=device, dtype=dtype).clone())
    if not start:
        raise ValueError("params must name at least one parameter")
    return start


def _gradients(
    shapes: list[torch.Size], dtype: torch.dtype, grad_dtype: torch.dtype, seed: int
) -> Iterator[list[torch.Tensor]]:
    """Each step's gradients, drawn on the CPU so that every device gets the same values."""
    generator = torch.Generator().manual_seed(seed + 1)  # not the stream the parameters came from
    ranges = [MAGNITUDES[d] for d in (dtype, grad_dtype) if d in MAGNITUDES]
    low, high = ranges[0] if ranges else DEFAULT_MAGNITUDES
    while True:
        step = []
        for shape in shapes:
            exponent = torch.empty(shape).uniform_(low, high, generator=generator)
            sign = torch.randint(0, 2, shape, generator=generator) * 2 - 1
            step.append((sign * 10.0**exponent).to(grad_dtype).to(dtype))
        yield step


def _build(factory: OptimizerFactory, tensors: list[torch.Tensor], role: str) -> Any:
    optimizer = factory(tensors)
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise TypeError(
            f"the {role} factory must return a torch.optim.Optimizer, "
            f"got {type(optimizer).__name__}"
        )
    if _needs_closure(optimizer):
        raise TypeError(
            f"the {role} optimizer {_name(optimizer)} needs a closure to step; closure-based "
            "optimizers (LBFGS and the like) are out of scope of assert_optimizer_matches, "
            "which feeds fixed gradients"
        )
    return optimizer


def _needs_closure(optimizer: torch.optim.Optimizer) -> bool:
    if isinstance(optimizer, torch.optim.LBFGS):
        return True
    closure = inspect.signature(optimizer.step).parameters.get("closure")
    return closure is not None and closure.default is inspect.Parameter.empty


def _name(optimizer: torch.optim.Optimizer) -> str:
    kind = type(optimizer)
    return f"{kind.__module__}.{kind.__qualname__}"


def _first_difference(
    sides: dict[str, tuple[list[torch.Tensor], Any]],
    tolerance: Tolerance,
    compare_state: bool,
) -> str | None:
    """A description of the first parameter, then state entry, outside the tolerance."""
    (mine, mine_opt), (theirs, their_opt) = sides["candidate"], sides["reference"]
    for index, (actual, expected) in enumerate(zip(mine, theirs)):
        found = _difference(actual, expected, tolerance)
        if found:
            return f"parameter {index} {_describe(expected)}\n{found}"
    if not compare_state:
        return None
    for index, (actual, expected) in enumerate(zip(mine, theirs)):
        for key, a, b in _shared_state(mine_opt.state[actual], their_opt.state[expected]):
            found = _difference(a, b, tolerance)
            if found:
                return f"state {key!r} of parameter {index} {_describe(expected)}\n{found}"
    return None


def _describe(tensor: torch.Tensor) -> str:
    return f"(shape {tuple(tensor.shape)}, {tensor.dtype})"


def _shared_state(
    mine: dict[str, Any], theirs: dict[str, Any]
) -> Iterable[tuple[str, torch.Tensor, torch.Tensor]]:
    """State entries under the same key, tensors of the same shape on both sides."""
    for key in sorted(set(mine) & set(theirs), key=str):
        a, b = mine[key], theirs[key]
        if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.shape == b.shape:
            yield key, a, b


def _difference(actual: torch.Tensor, expected: torch.Tensor, tolerance: Tolerance) -> str | None:
    """Why ``actual`` is not close to ``expected`` (NaN never is), or None."""
    # float32 at least: differences of low-precision values must not round away.
    common = torch.promote_types(torch.promote_types(actual.dtype, expected.dtype), torch.float32)
    a = actual.detach().to(common).flatten()
    b = expected.detach().to(device=a.device, dtype=common).flatten()
    atol = tolerance.atol_for(b)
    bound = atol + tolerance.rtol * b.abs()
    error = (a - b).abs().nan_to_num(nan=float("inf"))
    outside = ~(error <= bound)
    if not bool(outside.any()):
        return None
    relative = (error / b.abs()).nan_to_num(nan=0.0)  # 0/0: two equal zeros
    worst = int(torch.where(outside, (error / bound).nan_to_num(nan=float("inf")), -1.0).argmax())
    where = tuple(int(i) for i in torch.unravel_index(torch.tensor(worst), expected.shape))
    scaled = "" if tolerance.atol is not None else f" (atol here {atol:.3g})"
    return (
        f"{int(outside.sum())} of {b.numel()} elements differ{scaled}\n"
        f"largest absolute error {float(error.max()):.3g}, "
        f"largest relative error {float(relative.max()):.3g}\n"
        f"furthest outside the tolerance: index {where}, "
        f"candidate {float(a[worst]):.7g}, reference {float(b[worst]):.7g}"
    )
