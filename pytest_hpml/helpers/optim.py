"""Step-by-step equivalence of two optimizers: :func:`assert_optimizer_matches`.

Both optimizers start from the same parameters (generated tensors, or a copy each of a model)
and receive the same gradients, step after step. Before the first step each must hold exactly
the parameters it was given, and their param groups must agree (hyperparameters and which
parameters each group holds); after every step parameters, and state both expose under the same
name, are compared. Loaded only on first use of ``pytest_hpml.assert_optimizer_matches``, so
importing torch here is free for everyone else.
"""

from __future__ import annotations

import copy
import inspect
import math
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Callable, Union

import torch

from .closeness import Tolerance, describe, difference

# Takes the iterable of tensors, the model copy or the mapping copy it is given.
OptimizerFactory = Callable[[Any], torch.optim.Optimizer]
ParamLike = Union[Sequence[int], torch.Tensor]
ModelLike = Union[torch.nn.Module, Mapping[str, torch.Tensor]]

# Non-square 2-D, 1-D and conv-like 4-D: a bug that mixes up dimensions or only touches matrices
# shows on one of them. Small, so that many steps stay cheap.
DEFAULT_SHAPES: tuple[tuple[int, ...], ...] = ((7, 4), (4,), (5, 3, 3, 3))
# Enough steps for bias corrections, accumulators and momentum warm-up to stop hiding a bug.
DEFAULT_STEPS = 25
# Gradient elements are ±10**u with u uniform in this range: four decades, and for float16 the
# three whose squares stay normal float16 numbers (Adam-style second moments square them).
MAGNITUDES: dict[torch.dtype, tuple[float, float]] = {torch.float16: (-2.0, 1.0)}
DEFAULT_MAGNITUDES = (-3.0, 1.0)
# Param-group keys that are no hyperparameters: the tensors (compared as membership, by name),
# and the switches that choose how torch computes a step, not what it computes: proving torch's
# foreach or fused kernel equal to its for-loop is what this helper is for.
NOT_HYPERPARAMETERS = frozenset(
    {"params", "param_names", "foreach", "fused", "capturable", "differentiable"}
)
# The same hyperparameter computed two ways (0.1 * 0.01 and 1e-3) differs in its last bits.
SETTING_RTOL = 1e-12
# Names listed in one message at most: a real model has hundreds of parameters.
MAX_NAMES = 10


@dataclass
class _Side:
    """One optimizer and the parameters it was given, by name."""

    role: str  # "candidate" or "reference"
    optimizer: torch.optim.Optimizer
    params: dict[str, torch.Tensor]  # the parameters to optimize: those that require grad
    names: dict[int, str]  # every parameter of its copy, frozen ones too, by id()


def assert_optimizer_matches(
    candidate: OptimizerFactory,
    reference: OptimizerFactory,
    *,
    model: ModelLike | None = None,
    steps: int = DEFAULT_STEPS,
    params: Sequence[ParamLike] | None = None,
    device: str | torch.device | None = None,
    dtype: Any = None,
    rtol: float | None = None,
    atol: float | None = None,
    seed: int = 0,
    grad_dtype: torch.dtype | None = None,
    compare_state: bool = True,
    compare_groups: bool = True,
) -> None:
    """Assert that ``candidate`` updates parameters as ``reference`` does, step after step.

    Two forms. Without ``model``, ``candidate`` and ``reference`` take an iterable of tensors
    and return a ``torch.optim.Optimizer`` (e.g. ``lambda p: torch.optim.Adam(p, lr=1e-3)``);
    the tensors are ``params`` (shapes, values drawn from ``seed``, or tensors whose values are
    used), named ``param[0]``, ``param[1]``, ... in messages, in ``dtype`` (default float32;
    also a ``pytest_hpml.Precision``) on ``device`` (default cpu). With ``model`` (an
    ``nn.Module``, or a ``named_parameters()`` mapping of names to tensors) each factory gets
    its own ``copy.deepcopy`` of it (e.g. ``lambda m: m.configure_optimizers(cfg)``), moved to
    ``device``/``dtype`` only when those are given; the parameters that require grad are the
    ones to optimize, named as the model names them.

    Before the first step: each optimizer must hold every parameter it was given exactly once
    and no other tensor; then, with ``compare_groups``, the param groups (matched by position)
    must have the same hyperparameters (every key both have, except the tensors and torch's
    foreach/fused/capturable/differentiable switches) and hold the same parameters. Then both
    get the same gradients, per parameter name: random signs, magnitudes spanning several
    decades, in each parameter's dtype, rounded through ``grad_dtype`` when given (float16
    gradients reaching float32 master weights, as under mixed precision). After every step the
    parameters are compared, then, with ``compare_state``, every state entry both optimizers
    hold under the same key as tensors of the same shape. A parameter held wrongly, a group
    difference, or a value differing beyond ``rtol``/``atol`` (defaults follow each parameter's
    dtype) raises an AssertionError naming the parameters by name (and for values the step, the
    state key, the largest errors and the tolerance). Closure-based optimizers (LBFGS) raise a
    TypeError.
    """
    if steps < 1:
        raise ValueError(f"steps must be at least 1, got {steps}")
    if model is not None and params is not None:
        raise ValueError("pass either model or params, not both")
    copies = _copier(model, params, device, dtype, seed)
    sides = (_side(candidate, "candidate", *copies()), _side(reference, "reference", *copies()))
    _check_held(sides, _ids(model))
    if compare_groups:
        _check_groups(*sides)
    _run(sides, steps, rtol, atol, seed, grad_dtype, compare_state)


def _copier(
    model: ModelLike | None,
    params: Sequence[ParamLike] | None,
    device: str | torch.device | None,
    dtype: Any,
    seed: int,
) -> Callable[[], tuple[Any, dict[str, torch.Tensor]]]:
    """What makes one side's copy: the argument its factory gets, and its parameters by name."""
    if model is None:
        default_dtype = torch.float32 if dtype is None else dtype
        start = _start(params, torch.device(device or "cpu"), _dtype(default_dtype), seed)
        return lambda: _tensor_copy(start)
    _named(model)  # a wrong model fails here, before any factory runs
    to_device = None if device is None else torch.device(device)
    to_dtype = None if dtype is None else _dtype(dtype)
    return lambda: _model_copy(model, to_device, to_dtype)


def _tensor_copy(start: dict[str, torch.Tensor]) -> tuple[Any, dict[str, torch.Tensor]]:
    fresh = {name: t.clone().requires_grad_() for name, t in start.items()}
    return list(fresh.values()), fresh


def _model_copy(
    model: ModelLike, device: torch.device | None, dtype: torch.dtype | None
) -> tuple[Any, dict[str, torch.Tensor]]:
    """A deep copy of ``model`` (tied weights stay tied), moved to ``device``/``dtype`` if given."""
    move = device is not None or dtype is not None
    if isinstance(model, torch.nn.Module):
        own = copy.deepcopy(model)
        if move:
            own.to(device=device, dtype=dtype)
        return own, _named(own)
    mapping = copy.deepcopy(dict(model))
    tensors = {id(t): t for t in mapping.values()}.values()  # a tied tensor once
    with torch.no_grad():
        for tensor in tensors if move else ():
            # .data keeps each tensor's identity (and its Parameter class) as .to() would not.
            tensor.data = tensor.data.to(
                device=tensor.device if device is None else device,
                dtype=tensor.dtype if dtype is None else dtype,
            )
    return mapping, _named(mapping)


def _named(model: ModelLike) -> dict[str, torch.Tensor]:
    """The model's parameters by name."""
    if isinstance(model, torch.nn.Module):
        return dict(model.named_parameters())
    if not isinstance(model, Mapping):
        raise TypeError(
            "model must be a torch.nn.Module or a mapping of names to tensors "
            f"(dict(model.named_parameters())), got {type(model).__name__}"
        )
    wrong = [name for name, t in model.items() if not isinstance(t, torch.Tensor)]
    if wrong:
        raise TypeError(f"model maps names to tensors; not a tensor: {_list(wrong)}")
    return dict(model)


def _ids(model: ModelLike | None) -> dict[int, str]:
    """The names of the parameters of the model the caller passed in, by id()."""
    return {} if model is None else _by_id(_named(model))


def _by_id(named: dict[str, torch.Tensor]) -> dict[int, str]:
    """Names by tensor id(); a tensor under two names (a tied weight) keeps its first."""
    names: dict[int, str] = {}
    for name, tensor in named.items():
        names.setdefault(id(tensor), name)
    return names


def _side(
    factory: OptimizerFactory, role: str, given: Any, named: dict[str, torch.Tensor]
) -> _Side:
    names = _by_id(named)
    trainable = {n: t for n, t in named.items() if names[id(t)] == n and t.requires_grad}
    if not trainable:
        raise ValueError("the model has no parameter that requires grad")
    return _Side(role, _build(factory, given, role), trainable, names)


def _dtype(value: Any) -> torch.dtype:
    """A torch dtype, or the ``dtype`` of a ``pytest_hpml.Precision``."""
    dtype = value if isinstance(value, torch.dtype) else getattr(value, "dtype", None)
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise TypeError(f"dtype must be a floating-point torch.dtype or a Precision, got {value!r}")
    return dtype


def _start(
    params: Sequence[ParamLike] | None, device: torch.device, dtype: torch.dtype, seed: int
) -> dict[str, torch.Tensor]:
    """The starting parameters: given tensors' values, or standard normal values of each shape."""
    generator = torch.Generator().manual_seed(seed)
    start = {}
    for index, spec in enumerate(DEFAULT_SHAPES if params is None else params):
        if isinstance(spec, torch.Tensor):
            values = spec.detach()
        else:
            values = torch.randn(tuple(spec), generator=generator)
        start[f"param[{index}]"] = values.to(device=device, dtype=dtype).clone()
    if not start:
        raise ValueError("params must name at least one parameter")
    return start


def _check_held(sides: Iterable[_Side], originals: dict[int, str]) -> None:
    """Fail unless each optimizer holds each of its parameters once, and nothing else."""
    for side in sides:
        problem = _holding_problem(side, originals)
        if problem:
            raise AssertionError(
                f"the {side.role} optimizer does not hold the parameters it was given: {problem}"
            )


def _holding_problem(side: _Side, originals: dict[int, str]) -> str | None:
    held: Counter[str] = Counter()
    foreign: list[torch.Tensor] = []
    for group in side.optimizer.param_groups:
        for tensor in group["params"]:
            name = side.names.get(id(tensor))
            if name is None:
                foreign.append(tensor)
            else:
                held[name] += 1
    missing = [name for name in side.params if not held[name]]
    problems = (
        [f"{_list(missing)} {'is' if len(missing) == 1 else 'are'} missing"] if missing else []
    )
    problems += [f"{name} is held {count} times" for name, count in held.items() if count > 1]
    if not foreign:
        return "; ".join(problems) or None
    note = _foreign_note(foreign, originals)
    return f"{'; '.join(problems)} ({note})" if problems else note


def _foreign_note(foreign: list[torch.Tensor], originals: dict[int, str]) -> str:
    """What the tensors an optimizer holds but was not given are, as far as can be told."""
    one = len(foreign) == 1
    held = f"it holds {len(foreign)} tensor{'' if one else 's'} that {'is' if one else 'are'} not"
    if not originals:  # the tensor form: its factory only ever saw the list of tensors
        return f"{held} among the parameters it was given"
    held += f" {'a parameter' if one else 'parameters'} of its copy of the model"
    if all(id(t) in originals for t in foreign):  # the factory ignored its argument
        return (
            f"{held} but of the model passed as model= — build the optimizer from the copy "
            "the factory is given"
        )
    return f"{held} — was it built from another model?"


def _check_groups(candidate: _Side, reference: _Side) -> None:
    """Fail when the param groups' hyperparameters or members differ, group by group."""
    mine, theirs = candidate.optimizer.param_groups, reference.optimizer.param_groups
    found = []
    if len(mine) != len(theirs):
        found.append(
            f"the candidate has {len(mine)} param group{'s' if len(mine) != 1 else ''}, "
            f"the reference has {len(theirs)}"
        )
    for index, (a, b) in enumerate(zip(mine, theirs)):
        differences = _setting_differences(a, b) + _member_differences(a, b, candidate, reference)
        found += [f"param group {index}: {difference}" for difference in differences]
    if found:
        raise AssertionError("param groups differ before the first step:\n" + "\n".join(found))


def _setting_differences(mine: dict[str, Any], theirs: dict[str, Any]) -> list[str]:
    # Only keys both have: optimizers of different classes (a hand-written one and torch's) name
    # their options differently, and torch's carry defaults (maximize, amsgrad, ...).
    return [
        f"{key} {_show(value)} (candidate) != {_show(theirs[key])} (reference)"
        for key, value in mine.items()
        if key in theirs and key not in NOT_HYPERPARAMETERS and not _same(value, theirs[key])
    ]


def _same(a: Any, b: Any) -> bool:
    """Whether two hyperparameter values are the same setting."""
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        return bool(a.shape == b.shape and torch.equal(a.detach().cpu(), b.detach().cpu()))
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):  # lr=torch.tensor(1e-3)
        a, b = (_scalar(v) for v in (a, b))
    if isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, float) and isinstance(b, float):
        both_nan = math.isnan(a) and math.isnan(b)
        return both_nan or math.isclose(a, b, rel_tol=SETTING_RTOL, abs_tol=0.0)
    try:
        return bool(a == b)
    except (TypeError, ValueError, RuntimeError):  # == undefined, or not one truth value
        return a is b


def _scalar(value: Any) -> Any:
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        return value.item()
    return value


def _show(value: Any) -> str:
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        return f"tensor({value.item()!r})"  # all its digits: tensor's repr rounds to 4
    return repr(value)


def _member_differences(
    mine: dict[str, Any], theirs: dict[str, Any], candidate: _Side, reference: _Side
) -> list[str]:
    a, b = _members(mine, candidate), _members(theirs, reference)
    found = []
    if a - b:
        found.append(f"candidate holds {_list(_ordered(a - b, candidate))}, reference does not")
    if b - a:
        found.append(f"reference holds {_list(_ordered(b - a, reference))}, candidate does not")
    return found


def _members(group: dict[str, Any], side: _Side) -> set[str]:
    return {side.names[id(t)] for t in group["params"]}  # all known: checked before


def _ordered(names: set[str], side: _Side) -> list[str]:
    """``names`` in the model's order, so that messages list them as the model defines them."""
    return [name for name in side.names.values() if name in names]


def _list(names: Sequence[str]) -> str:
    shown = ", ".join(names[:MAX_NAMES])
    more = len(names) - MAX_NAMES
    return f"{shown}, ... ({more} more)" if more > 0 else shown


def _run(
    sides: tuple[_Side, _Side],
    steps: int,
    rtol: float | None,
    atol: float | None,
    seed: int,
    grad_dtype: torch.dtype | None,
    compare_state: bool,
) -> None:
    """Step both optimizers with the same gradients, comparing after every step."""
    grads = _gradients(sides[1].params, grad_dtype, seed)
    for step in range(1, steps + 1):
        step_grads = next(grads)
        for side in sides:
            for name, tensor in side.params.items():
                # A copy each: an optimizer may write to its grad.
                tensor.grad = step_grads[name].to(tensor.device, copy=True)
            side.optimizer.step()
        found = _first_difference(*sides, rtol, atol, compare_state)
        if found:
            problem, tolerance = found
            candidate, reference = (side.optimizer for side in sides)
            devices = ", ".join(sorted({str(t.device) for t in sides[1].params.values()}))
            raise AssertionError(
                f"optimizers differ at step {step} of {steps}: {problem}\n"
                f"tolerance: {tolerance}\n"
                f"candidate: {_name(candidate)}, reference: {_name(reference)}; "
                f"device {devices}, seed {seed}"
            )


def _gradients(
    params: dict[str, torch.Tensor], grad_dtype: torch.dtype | None, seed: int
) -> Iterator[dict[str, torch.Tensor]]:
    """Each step's gradients by name, drawn on the CPU so that every device gets the same."""
    generator = torch.Generator().manual_seed(seed + 1)  # not the stream the parameters came from
    while True:
        yield {
            name: _gradient(t.shape, t.dtype, grad_dtype or t.dtype, generator)
            for name, t in params.items()
        }


def _gradient(
    shape: torch.Size, dtype: torch.dtype, grad_dtype: torch.dtype, generator: torch.Generator
) -> torch.Tensor:
    ranges = [MAGNITUDES[d] for d in (dtype, grad_dtype) if d in MAGNITUDES]
    low, high = ranges[0] if ranges else DEFAULT_MAGNITUDES
    exponent = torch.empty(shape).uniform_(low, high, generator=generator)
    sign = torch.randint(0, 2, shape, generator=generator) * 2 - 1
    return (sign * 10.0**exponent).to(grad_dtype).to(dtype)


def _build(factory: OptimizerFactory, given: Any, role: str) -> Any:
    optimizer = factory(given)
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
    candidate: _Side,
    reference: _Side,
    rtol: float | None,
    atol: float | None,
    compare_state: bool,
) -> tuple[str, Tolerance] | None:
    """The first parameter, then state entry, outside its tolerance: why, and that tolerance."""
    pairs = [(name, candidate.params[name], t) for name, t in reference.params.items()]
    for name, actual, expected in pairs:
        tolerance = Tolerance.for_dtype(expected.dtype, rtol, atol)
        found = difference(actual, expected, tolerance)
        if found:
            return f"{name} {describe(expected)}\n{found}", tolerance
    if not compare_state:
        return None
    for name, actual, expected in pairs:
        tolerance = Tolerance.for_dtype(expected.dtype, rtol, atol)
        mine, theirs = candidate.optimizer.state[actual], reference.optimizer.state[expected]
        for key, a, b in _shared_state(mine, theirs):
            found = difference(a, b, tolerance)
            if found:
                return f"state {key!r} of {name} {describe(expected)}\n{found}", tolerance
    return None


def _shared_state(
    mine: dict[str, Any], theirs: dict[str, Any]
) -> Iterable[tuple[str, torch.Tensor, torch.Tensor]]:
    """State entries under the same key, tensors of the same shape on both sides."""
    for key in sorted(set(mine) & set(theirs), key=str):
        a, b = mine[key], theirs[key]
        if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.shape == b.shape:
            yield key, a, b
