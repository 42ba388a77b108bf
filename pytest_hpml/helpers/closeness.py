"""When two tensors are close: the tolerance of each dtype, and why two tensors are not, as
:func:`pytest_hpml.assert_optimizer_matches` says it. Imports torch: loaded on first use."""

from __future__ import annotations

from dataclasses import dataclass

import torch

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


def describe(tensor: torch.Tensor) -> str:
    """A tensor's shape and dtype, as a message names it."""
    return f"(shape {tuple(tensor.shape)}, {tensor.dtype})"


def difference(actual: torch.Tensor, expected: torch.Tensor, tolerance: Tolerance) -> str | None:
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
