"""Work counters: what one call of a benchmark asks of the machine, counted operator by operator
under a dispatch mode (Note [Work counters]).

The counts depend on the code and on torch's version, not on the machine or its load: the same
on a busy 2-core runner as on a quiet one. Where one changes, the record keeps what explains it:
the count of each operator, and for host syncs, copies between devices and tensors built from
Python data, the user's source lines where they happened.
"""

from __future__ import annotations

import inspect
import os
import sys
from collections import Counter
from types import FrameType
from typing import Any, Callable, NamedTuple

import torch

from .. import _compat
from .memory import Dispatching, StorageTracker, tensors
from .metrics import metric_of

# Operators that make the host wait for the device's result, by what they are, so that they
# show on a CPU runner too: the host needs their output's value or its size.
SYNC_OPS = {
    "aten::_local_scalar_dense": "item",  # .item(), float(t), int(t)
    "aten::is_nonzero": "bool",  # if t: ...
    "aten::equal": "equal",
    "aten::allclose": "allclose",
    "aten::nonzero": "nonzero",
    "aten::masked_select": "masked_select",
    "aten::_unique": "unique",
    "aten::_unique2": "unique",
    "aten::unique_dim": "unique",
    "aten::unique_consecutive": "unique",
}
INDEX_OPS = ("aten::index", "aten::index_put", "aten::index_put_")  # a boolean mask syncs
# Tensors made from Python data (torch.tensor(...) of a list or a number): built on the host.
HOST_TENSOR_OPS = ("aten::lift_fresh", "aten::lift_fresh_copy")
COPY_OPS = ("aten::_to_copy", "aten::copy_")
# In-place operators that change a tensor's shape or strides only: no kernel, as the views.
METADATA_OPS = frozenset(
    f"aten::{name}_"
    for name in ("unsqueeze", "squeeze", "t", "transpose", "swapdims", "swapaxes", "as_strided")
) | {"aten::detach_", "aten::sym_size", "aten::sym_stride", "aten::sym_numel"}
FLOP_DTYPES = ("float64", "float32", "bfloat16", "float16")  # FLOPs recorded even when 0
SITES_KEPT = 5  # source lines kept per operator in the record
_INSIDE = (
    os.path.dirname(torch.__file__) + os.sep,
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep,  # pytest_hpml
)


def user_line() -> str | None:
    """``file:line`` of the innermost frame outside torch and pytest-hpml: the user's line
    that asked for the operator (for backward's operators, the ``backward()`` call)."""
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        name = frame.f_code.co_filename
        if not name.startswith(_INSIDE) and not name.startswith("<"):
            return f"{_shown(name)}:{frame.f_lineno}"
        frame = frame.f_back
    return None


def _shown(path: str) -> str:
    """A path relative to the working directory where it lies below it."""
    try:
        relative = os.path.relpath(path)
    except ValueError:  # another drive
        return path
    return path if relative.startswith("..") else relative


def _ends(name: str, args: tuple[Any, ...], out: Any) -> tuple[Any, Any]:
    """(source, destination) of a copy operator."""
    if name == "aten::copy_":
        return (args[1] if len(args) > 1 else None), args[0]
    return args[0], out


class WorkCounter(StorageTracker):
    """Counts what the operators dispatched while active ask of the machine: operators by name,
    host syncs, copies between devices, tensors built from Python data, allocations (with the
    peak of live tensor memory) and FLOPs by dtype."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: Counter[str] = Counter()  # operators that compute
        self.views: Counter[str] = Counter()  # views and metadata operators: no kernel
        self.syncs: Counter[str] = Counter()  # what made the host wait: count
        self.copies: Counter[str] = Counter()  # "cpu->cuda": count
        self.copy_bytes = 0
        self.host_tensors = 0
        self.flops: Counter[str] = Counter()  # dtype: FLOPs
        self.tally: Counter[FlopKey] = Counter()  # the same by device and kind (Note [MFU])
        self.sites: dict[str, Counter[str]] = {}  # operator: source lines
        self.saved_tensors = 0  # tensors autograd kept for backward
        self.saved_bytes = 0
        self._formulas = _compat.flop_formulas()
        self._saving = torch.autograd.graph.saved_tensors_hooks(self._saved, lambda kept: kept)

    def __enter__(self) -> WorkCounter:
        self._saving.__enter__()
        super().__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        try:
            return super().__exit__(*exc)
        finally:
            self._saving.__exit__(*exc)

    def _saved(self, tensor: torch.Tensor) -> torch.Tensor:
        """A tensor autograd keeps for backward (an eval step without ``no_grad`` keeps some)."""
        self.saved_tensors += 1
        self.saved_bytes += tensor.numel() * tensor.element_size()
        return tensor

    def dispatch(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """Run the operator and count what it asked for."""
        out = func(*args, **kwargs)
        name = func.name().partition(".")[0]  # aten::add, of aten::add.Tensor
        (self.views if _is_view(func, name) else self.ops)[name] += 1
        why = _sync(name, args, out)
        if why:
            self.syncs[why] += 1
            self._site(name)
        if name in HOST_TENSOR_OPS:
            self.host_tensors += 1
            self._site(name)
        if name in COPY_OPS:
            self._copy(name, args, out)
        self.track(out)
        self._count_flops(func, args, kwargs, out)
        return out

    def _site(self, name: str) -> None:
        line = user_line()
        if line is not None:
            self.sites.setdefault(name, Counter())[line] += 1

    def _copy(self, name: str, args: tuple[Any, ...], out: Any) -> None:
        """A copy whose source and destination lie on different devices."""
        source, target = _ends(name, args, out)
        if not isinstance(source, torch.Tensor) or not isinstance(target, torch.Tensor):
            return
        if source.device.type == target.device.type:
            return
        self.copies[f"{source.device.type}->{target.device.type}"] += 1
        self.copy_bytes += source.numel() * source.element_size()
        self._site(name)

    def _count_flops(
        self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any
    ) -> None:
        found = operator_flops(self._formulas, func, args, kwargs, out)
        if found is not None:
            key, flops = found
            self.flops[key.dtype] += flops
            self.tally[key] += flops

    def metrics(self) -> dict[str, tuple[int, dict[str, Any]]]:
        """Each counter: its value and what explains it (counts per operator or per kind, and
        the source lines of syncs, copies and host tensors)."""
        return {
            "ops": (sum(self.ops.values()), {"ops": dict(self.ops)}),
            "views": (sum(self.views.values()), {"ops": dict(self.views)}),
            "syncs": (sum(self.syncs.values()), self._detail(self.syncs)),
            "host_tensors": (self.host_tensors, self._detail({}, HOST_TENSOR_OPS)),
            "copies": (sum(self.copies.values()), self._detail(self.copies, COPY_OPS)),
            "copy_bytes": (self.copy_bytes, {}),
            "allocations": (self.allocations, {}),
            "allocated_bytes": (self.allocated_bytes, {}),
            "saved_tensors": (self.saved_tensors, {}),
            "saved_bytes": (self.saved_bytes, {}),
            # the usual dtypes always, so that one appearing or vanishing is a changed count
            **{f"flops[{t}]": (self.flops[t], {}) for t in sorted({*FLOP_DTYPES, *self.flops})},
        }

    def _detail(self, counts: dict[str, int], ops: tuple[str, ...] = ()) -> dict[str, Any]:
        """``counts`` by kind, and the source lines of ``ops`` (of every sync, by default)."""
        ops = ops or (*SYNC_OPS, *INDEX_OPS, *COPY_OPS)
        sites = {op: dict(self.sites[op].most_common(SITES_KEPT)) for op in ops if op in self.sites}
        detail: dict[str, Any] = {"by": dict(counts)} if counts else {}
        return {**detail, "sites": sites} if sites else detail


class FlopKey(NamedTuple):
    """Where FLOPs ran: the device and dtype of the operator's first input, and whether it is
    a convolution (cuDNN's TF32 flag applies) or not (the matmul flag does)."""

    device: str  # "cuda:0", "cpu"
    dtype: str  # "float32", "bfloat16"
    convolution: bool


def operator_flops(
    formulas: dict[Any, Callable[..., int]],
    func: Any,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    out: Any,
) -> tuple[FlopKey, int] | None:
    """The FLOPs of one operator by torch's formula, and where they ran; None for none."""
    formula = formulas.get(func.overloadpacket)
    inputs = tensors(args)
    if formula is None or not inputs:
        return None
    flops = int(formula(*args, **kwargs, out_val=out))
    if not flops:
        return None
    first = inputs[0]
    dtype = str(first.dtype).removeprefix("torch.")
    return FlopKey(str(first.device), dtype, "conv" in func.name()), flops


class FlopTally(Dispatching):
    """Only the FLOPs of the operators dispatched while active, by :class:`FlopKey`: what the
    ``mfu`` metric needs in a process that does not count the work (Note [MFU])."""

    def __init__(self) -> None:
        super().__init__()
        self.tally: Counter[FlopKey] = Counter()
        self._formulas = _compat.flop_formulas()

    def dispatch(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        out = func(*args, **kwargs)
        found = operator_flops(self._formulas, func, args, kwargs, out)
        if found is not None:
            self.tally[found[0]] += found[1]
        return out


def count_flops_by_key(call: Callable[[], Any]) -> Counter[FlopKey] | None:
    """The FLOPs of one call of ``call`` by :class:`FlopKey`; None where it cannot run under
    a dispatch mode."""
    mode = FlopTally if "torch._dynamo" in sys.modules else _UnguardedTally  # as count_work
    try:
        with mode() as counter:
            call()
    except Exception:
        return None
    tally: Counter[FlopKey] = counter.tally
    return tally


def _is_view(func: Any, name: str) -> bool:
    """Whether an operator only makes a view or reads or sets metadata (Note [Work
    counters]): its outputs alias its inputs by its schema, as ``view``, ``select`` and
    ``expand`` do, or it is one of :data:`METADATA_OPS`."""
    return name in METADATA_OPS or bool(getattr(func, "is_view", False))


def _sync(name: str, args: tuple[Any, ...], out: Any) -> str | None:
    """What makes this operator a host sync, or None: its kind, a boolean mask as index (the
    result's size depends on the mask's values), or a copy from a device to the host."""
    if name in SYNC_OPS:
        return SYNC_OPS[name]
    if name in INDEX_OPS and any(t.dtype == torch.bool for t in tensors(args[1:2])):
        return "boolean index"
    if name in COPY_OPS and _device_to_host(*_ends(name, args, out)):
        return "to host"
    return None


def _device_to_host(source: Any, target: Any) -> bool:
    if not isinstance(source, torch.Tensor) or not isinstance(target, torch.Tensor):
        return False
    return source.device.type not in ("cpu", "meta") and target.device.type == "cpu"


def count_work(call: Callable[[], Any]) -> WorkCounter | None:
    """The work of one call of ``call``; None where it cannot run under a dispatch mode (some
    compiled code cannot)."""
    # Without dynamo loaded, no compiled code runs: its guard would only cost its import.
    mode = WorkCounter if "torch._dynamo" in sys.modules else _Unguarded
    try:
        with mode() as counter:
            call()
    except Exception:
        return None
    found: WorkCounter = counter
    return found


def over_budget(counter: WorkCounter, bounds: dict[str, float]) -> list[str]:
    """What ``benchmark.expect(**bounds)`` finds above its bounds (numbers, checked at the
    call), with what explains it."""
    counted = counter.metrics()
    problems = []
    for name, bound in bounds.items():
        value, detail = counted.get(metric_of(name), (0, {}))
        if value > bound:
            problems.append(f"{name}: {value:,} per call, expected at most {bound:,}{_why(detail)}")
    return problems


def _why(detail: dict[str, Any]) -> str:
    """The source lines of a counter's detail, as ``(aten::x at file.py:12 x2, ...)``."""
    lines = [
        f"{op} at {line}" + (f" x{n}" if n > 1 else "")
        for op, sites in detail.get("sites", {}).items()
        for line, n in sites.items()
    ]
    return f" ({', '.join(lines)})" if lines else ""


# Dispatching's __torch_dispatch__ as written, not as torch wrapped it (see count_work)
_Unguarded = _compat.unguarded_dispatch_mode(
    WorkCounter, inspect.unwrap(Dispatching.__torch_dispatch__)
)
_UnguardedTally = _compat.unguarded_dispatch_mode(
    FlopTally, inspect.unwrap(Dispatching.__torch_dispatch__)
)
