"""Pruning that really shrinks a model: :func:`assert_shrinks`, :func:`prune`, :func:`nni_speedup`.

Pruning a model with NNI only masks weights: the model keeps its size and its cost until NNI's
``ModelSpeedup`` removes the masked channels. :func:`assert_shrinks` checks that a pruned model
is smaller than the dense one in parameters, bytes and FLOPs, and names each measure that is
not. :func:`prune` is the one-call NNI pipeline (pruner, masks, speed-up) on a copy of a model;
:func:`nni_speedup` is the speed-up step alone, traced with ``torch.fx.symbolic_trace`` (NNI
3.0's own tracer fails on recent torch), with one clear error for a model that cannot be traced.

Loaded only on first use of one of these names: torch and NNI are imported here, never by
``import pytest_hpml``; NNI only when :func:`prune` or :func:`nni_speedup` runs.
"""

from __future__ import annotations

import contextlib
import copy
import io
import logging
import math
import warnings
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Callable, Union

import torch

from ..bench.counters import count_flops, model_size
from ..logs import quieted

MEASURES = ("params", "bytes", "flops")
PRUNERS = {"l1": "L1NormPruner", "l2": "L2NormPruner", "fpgm": "FPGMPruner"}
INSTALL_HINT = "pip install nni (pytest-hpml's 'suites' extra)"

Inputs = Union[torch.Tensor, Sequence[Any]]
Bounds = Union[float, Mapping[str, float], None]


class UntraceableModelError(RuntimeError):
    """NNI's speed-up needs the model as a ``torch.fx`` graph, and this model cannot be traced."""


@dataclass(frozen=True)
class Footprint:
    """A model's size and cost: parameters, bytes of parameters and buffers, and the FLOPs of
    one forward pass on given inputs (None when no inputs were given)."""

    params: int
    bytes: int
    flops: int | None = None

    @classmethod
    def of(cls, model: torch.nn.Module, example_inputs: Inputs | None = None) -> Footprint:
        """Measure ``model``; FLOPs are counted by torch's ``FlopCounterMode`` on one forward
        pass on ``example_inputs`` (a tensor or a tuple of arguments), in eval mode without
        gradients so that nothing in the model (BatchNorm statistics) changes."""
        params, size = model_size(model)
        if example_inputs is None:
            return cls(params, size)
        return cls(params, size, _flops(model, _as_args(example_inputs)))


@dataclass(frozen=True)
class Shrinkage:
    """What :func:`assert_shrinks` measured: both footprints and, for each measure compared,
    the ratio pruned / dense (0.5: half the size)."""

    dense: Footprint
    pruned: Footprint
    ratios: dict[str, float] = field(default_factory=dict)


def assert_shrinks(
    dense: torch.nn.Module,
    pruned: torch.nn.Module,
    *,
    example_inputs: Inputs | None = None,
    max_ratio: Bounds = None,
    measures: Sequence[str] | None = None,
) -> Shrinkage:
    """Assert that ``pruned`` is smaller than ``dense`` in every measure, and return the figures.

    Measures: ``"params"`` (parameter count), ``"bytes"`` (parameters and buffers) and, when
    ``example_inputs`` are given, ``"flops"`` (one forward pass on them, counted by torch's
    ``FlopCounterMode``); ``measures`` picks some of them. For each measure the ratio
    pruned / dense must be below 1, or at most ``max_ratio`` when given: a number in (0, 1)
    for every measure, or a mapping such as ``{"flops": 0.5}`` bounding the measures it names
    (the others must still shrink). Raises an AssertionError naming every measure that did not
    shrink enough, with both figures and the ratio.
    """
    __tracebackhide__ = True  # a failure shows the caller's line, not this module
    chosen = _measures(measures, example_inputs)
    bounds = _bounds(max_ratio, chosen)
    before = Footprint.of(dense, example_inputs if "flops" in chosen else None)
    after = Footprint.of(pruned, example_inputs if "flops" in chosen else None)
    ratios = {m: _ratio(getattr(before, m), getattr(after, m)) for m in chosen}
    rows, failed = [], []
    for measure in chosen:
        bound = bounds.get(measure)
        ok = ratios[measure] <= bound if bound is not None else ratios[measure] < 1
        if not ok:
            failed.append(measure)
        rows.append(
            [
                measure,
                f"{getattr(before, measure):,}",
                f"{getattr(after, measure):,}",
                f"{ratios[measure]:.3f}",
                f"<= {bound:g}" if bound is not None else "< 1",
                "ok" if ok else "FAILED",
            ]
        )
    if failed:
        where = ""
        if "flops" in chosen:
            inputs = _describe(_as_args(example_inputs))
            where = f"\nflops: one forward pass in eval mode on inputs {inputs}"
        raise AssertionError(
            f"pruned model did not shrink enough in {', '.join(failed)}\n"
            + _table([["measure", "dense", "pruned", "pruned/dense", "needs", ""], *rows])
            + f"\ndense: {_name(dense)}, pruned: {_name(pruned)}{where}"
        )
    return Shrinkage(before, after, ratios)


def prune(
    model: torch.nn.Module,
    sparsity: float,
    example_inputs: Inputs | None = None,
    *,
    op_types: Sequence[str] = ("Conv2d",),
    pruner: str | Callable[..., Any] = "l1",
    speed_up: bool = True,
) -> torch.nn.Module:
    """A pruned copy of ``model`` (``model`` itself is left as it was).

    NNI's ``pruner`` (``"l1"``: ``L1NormPruner``, ``"l2"``, ``"fpgm"``, or a pruner class taking
    ``(model, config_list)``) masks the fraction ``sparsity`` of the output channels of every
    module of ``op_types``; then, with ``speed_up``, :func:`nni_speedup` removes the masked
    channels (and the inputs of the layers that read them) using ``example_inputs``. Without
    ``speed_up`` the copy keeps its shape, the masked weights set to zero: what pruning alone
    does.
    """
    if not 0 < sparsity < 1:
        raise ValueError(f"sparsity must be between 0 and 1 (exclusive), got {sparsity!r}")
    if speed_up and example_inputs is None:
        raise ValueError("speed_up needs example_inputs: NNI runs the model to find what to remove")
    if isinstance(op_types, str):
        op_types = (op_types,)
    nni = _import_nni()
    if isinstance(pruner, str):
        if pruner not in PRUNERS:
            raise ValueError(
                f"pruner must be one of {', '.join(PRUNERS)} or a class, got {pruner!r}"
            )
        make = nni[PRUNERS[pruner]]
    else:
        make = pruner
    copied = copy.deepcopy(model)
    with quieted("nni"):
        compressor = make(copied, [{"op_types": list(op_types), "sparse_ratio": sparsity}])
        _, masks = compressor.compress()
        compressor.unwrap_model()
    if not masks:
        raise ValueError(f"no module of {_name(model)} has a type in op_types={list(op_types)}")
    if speed_up:
        return nni_speedup(copied, masks, example_inputs)
    _apply_masks(copied, masks)
    return copied


def nni_speedup(
    model: torch.nn.Module,
    masks: Mapping[str, Mapping[str, torch.Tensor | None]],
    example_inputs: Inputs,
    *,
    graph_module: torch.fx.GraphModule | None = None,
) -> torch.nn.Module:
    """Remove the channels ``masks`` zero from ``model``, in place, with NNI's ``ModelSpeedup``;
    returns ``model``, now smaller.

    ``masks`` are an NNI pruner's (``{module name: {"weight": mask, ...}}``, the second value of
    ``pruner.compress()``). The model is traced with ``torch.fx.symbolic_trace``, or
    ``graph_module`` is used when given (a trace of your own, e.g. with ``concrete_args`` or a
    tracer that keeps a module whole). A model that cannot be traced (control flow that depends
    on the inputs, calls torch.fx cannot follow) raises :class:`UntraceableModelError` naming
    the model and the reason. NNI runs in eval mode; every module keeps its training mode, and
    the layers NNI puts in take the model's. NNI's log messages below ERROR and its debugging
    prints are silenced while it runs.
    """
    nni = _import_nni()
    args = _as_args(example_inputs)
    # NNI runs the model in the mode it finds it in (BatchNorm in training mode refuses a single
    # value per channel) and makes its replacement layers in training mode whatever that was.
    with _eval_mode(model, graph_module):
        if graph_module is None:
            try:
                graph_module = torch.fx.symbolic_trace(model)
            except Exception as error:
                raise UntraceableModelError(
                    f"cannot speed up {_name(model)}: torch.fx.symbolic_trace cannot trace it: "
                    f"{type(error).__name__}: {_first_line(error)}\n"
                    "NNI's ModelSpeedup needs the whole forward pass as one static graph: "
                    "remove control flow that depends on the inputs from forward, or trace the "
                    "model yourself (torch.fx.symbolic_trace(model, concrete_args=...), or a "
                    "Tracer that keeps the offending submodule whole) and pass graph_module="
                ) from error
        dummy = args[0] if len(args) == 1 else args
        with quieted("nni"), contextlib.redirect_stdout(io.StringIO()):
            speedup = nni["ModelSpeedup"](
                model, dummy, dict(masks), graph_module=graph_module, logger=_nni_logger()
            )
            return speedup.speedup_model()


def _import_nni() -> dict[str, Any]:
    """NNI's pruners and ModelSpeedup, imported without the warnings NNI 3.0 gives on recent
    torch (deprecated pytree registration: nothing a user can act on)."""
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings(
                "ignore", message=".*_register_pytree_node", category=FutureWarning
            )
            warnings.filterwarnings("ignore", message=".*already registered as pytree node")
            from nni.compression import pruning
            from nni.compression.speedup import ModelSpeedup
    except ImportError as error:
        raise ImportError(
            f"pruning with pytest_hpml needs NNI ({error}): {INSTALL_HINT}"
        ) from error
    found = {name: getattr(pruning, name) for name in PRUNERS.values()}
    found["ModelSpeedup"] = ModelSpeedup
    return found


def _nni_logger() -> logging.Logger:
    # Under the "nni" logger, so that quieted("nni") governs it (ModelSpeedup without a logger of
    # its own sets its module logger to INFO for good).
    return logging.getLogger("nni.pytest_hpml")


def _apply_masks(model: torch.nn.Module, masks: Mapping[str, Mapping[str, Any]]) -> None:
    """Multiply each masked tensor by its mask, in place: masked weights become zero."""
    modules = dict(model.named_modules())
    with torch.no_grad():
        for name, targets in masks.items():
            for target, mask in targets.items():
                tensor = getattr(modules[name], target, None)
                if mask is not None and isinstance(tensor, torch.Tensor):
                    tensor.mul_(mask.to(tensor.device, tensor.dtype))


def _measures(measures: Sequence[str] | None, example_inputs: Inputs | None) -> list[str]:
    if measures is None:
        return [m for m in MEASURES if m != "flops" or example_inputs is not None]
    if isinstance(measures, str):
        measures = [measures]
    unknown = [m for m in measures if m not in MEASURES]
    if unknown or not measures:
        raise ValueError(f"measures must be some of {', '.join(MEASURES)}, got {list(measures)}")
    if "flops" in measures and example_inputs is None:
        raise ValueError("counting flops needs example_inputs (the inputs of one forward pass)")
    return [m for m in MEASURES if m in measures]


def _bounds(max_ratio: Bounds, chosen: list[str]) -> dict[str, float]:
    if max_ratio is None:
        return {}
    if isinstance(max_ratio, Mapping):
        bounds = dict(max_ratio)
        unknown = [m for m in bounds if m not in chosen]
        if unknown:
            raise ValueError(
                f"max_ratio names {', '.join(map(str, unknown))}, not among the measures "
                f"compared ({', '.join(chosen)})"
            )
    else:
        bounds = dict.fromkeys(chosen, max_ratio)
    for measure, bound in bounds.items():
        if isinstance(bound, bool) or not isinstance(bound, (int, float)) or not 0 < bound < 1:
            raise ValueError(
                f"max_ratio for {measure} must be a number between 0 and 1 (exclusive): the "
                f"largest pruned/dense ratio accepted (0.5: at least halved), got {bound!r}"
            )
    return bounds


def _ratio(dense: float, pruned: float) -> float:
    if dense:
        return pruned / dense
    return 1.0 if pruned == 0 else math.inf  # nothing to shrink: counts as not shrunk


def _flops(model: torch.nn.Module, args: tuple[Any, ...]) -> int:
    with _eval_mode(model), torch.no_grad():
        model(*args)  # a model that cannot run on these inputs fails here, with its error
        flops = count_flops(lambda: model(*args))
    if flops is None:
        raise RuntimeError(
            f"cannot count the FLOPs of {_name(model)} under torch's FlopCounterMode; "
            "compare without them: measures=('params', 'bytes')"
        )
    return flops


@contextlib.contextmanager
def _eval_mode(*models: torch.nn.Module | None) -> Iterator[None]:
    """Every module of ``models`` in eval mode inside; each one's own mode restored after, and a
    module made meanwhile (ModelSpeedup's replacements) given its root model's mode."""
    modes = {m: m.training for model in models if model is not None for m in model.modules()}
    for module in modes:
        module.training = False
    try:
        yield
    finally:
        for module, mode in modes.items():
            module.training = mode
        for model in models:
            for module in model.modules() if model is not None else ():
                if module not in modes:  # made meanwhile (ModelSpeedup's replacements)
                    module.training = modes[model]


def _table(rows: list[list[str]]) -> str:
    """Rows as aligned columns: names and verdicts to the left, numbers to the right."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    right = {1, 2, 3}
    return "\n".join(
        "  "
        + "  ".join(
            cell.rjust(width) if i in right else cell.ljust(width)
            for i, (cell, width) in enumerate(zip(row, widths))
        ).rstrip()
        for row in rows
    )


def _as_args(example_inputs: Any) -> tuple[Any, ...]:
    return tuple(example_inputs) if isinstance(example_inputs, (tuple, list)) else (example_inputs,)


def _describe(args: tuple[Any, ...]) -> str:
    return ", ".join(
        f"{tuple(a.shape)} {str(a.dtype).removeprefix('torch.')}"
        if isinstance(a, torch.Tensor)
        else type(a).__name__
        for a in args
    )


def _name(model: Any) -> str:
    kind = type(model)
    return f"{kind.__module__}.{kind.__qualname__}"


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else "(no message)"
