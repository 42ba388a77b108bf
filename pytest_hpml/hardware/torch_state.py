"""The process state a benchmark measures in: torch's intra-op thread count, the random number
generators' seed, and what else of torch's global state changes the work (grad mode, default
dtype, float32 matmul precision, deterministic algorithms). Note [Torch state].

The same in every process of a run, on both sides of ``--hpml-against``, however and whenever
the test imports torch: a test that imports it inside its body, after its fixtures started,
gets the thread count and the seed the moment the import finishes, so that what the test sets
itself afterwards still wins. Imported by the fixtures that use it, never at start-up; torch
is imported by none of this module's functions that a run without it calls.
"""

from __future__ import annotations

import contextlib
import importlib.abc
import random
import sys
from collections.abc import Iterator, Sequence
from types import ModuleType
from typing import Any, Callable

# The variables OpenMP and MKL read once, when they load: a process started with them runs
# torch's intra-op pool at that count from its first operator, whoever imports torch.
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")


def thread_environment(count: int | None) -> dict[str, str]:
    """What a fresh process's environment needs for torch to start at ``count`` threads."""
    return {} if count is None else {name: str(count) for name in THREAD_VARIABLES}


@contextlib.contextmanager
def threads_set(count: int | None) -> Iterator[None]:
    """torch's intra-op thread count (process-wide) set to ``count`` inside, put back after;
    nothing where ``count`` is None or torch is not loaded."""
    torch = sys.modules.get("torch")
    if count is None or torch is None:
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def seed_everything(seed: int) -> None:
    """Seed random, numpy (when installed) and torch (all devices), importing them."""
    with contextlib.suppress(ImportError):
        import numpy  # noqa: F401
    import torch  # noqa: F401

    seed_loaded(seed)


def seed_loaded(seed: int) -> None:
    """Seed random, and numpy and torch where they are loaded already (importing neither)."""
    random.seed(seed)
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        numpy.random.seed(seed)
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.manual_seed(seed)


# What a benchmark record keeps of torch's state (:func:`observed`), and compares.
STATE_KEYS = ("threads", "grad", "dtype", "matmul", "deterministic")


def observed() -> dict[str, Any]:
    """torch's state now, as a benchmark record keeps it; empty where torch is not loaded."""
    torch = sys.modules.get("torch")
    if torch is None:
        return {}
    return {
        "threads": torch.get_num_threads(),
        "grad": torch.is_grad_enabled(),
        "dtype": str(torch.get_default_dtype()).removeprefix("torch."),
        "matmul": torch.get_float32_matmul_precision(),
        "deterministic": torch.are_deterministic_algorithms_enabled(),
    }


def differences(sides: dict[str, Sequence[dict[str, Any]]]) -> list[str]:
    """How the states of the processes of each side (name -> states) differ between the
    sides, or within one: ``threads: base 1, head 2``. Processes that recorded no state (a
    pure-Python benchmark, a record of an older version) are left out."""
    found = []
    for key in STATE_KEYS:
        seen = {
            name: sorted({str(s[key]) for s in states if s and key in s})
            for name, states in sides.items()
        }
        seen = {name: values for name, values in seen.items() if values}
        if len({v for values in seen.values() for v in values}) > 1:
            found.append(
                f"{key}: " + ", ".join(f"{name} {'/'.join(v)}" for name, v in seen.items())
            )
    return found


class TorchState:
    """What a benchmark sets and restores: the thread count (None: left alone) and the seed.

    :meth:`start` when the test starts: applied at once where torch is loaded, else the moment
    the test imports it. :meth:`reseed` before each measurement, so that every process draws
    the same random numbers however many calls came before. :meth:`stop` at teardown puts back
    what the test found: the thread count, grad mode, default dtype, matmul precision,
    deterministic mode and the generators' states.
    """

    def __init__(self, threads: int | None, seed: int) -> None:
        self.threads = threads
        self.seed = seed
        self._saved: list[Callable[[], None]] = []
        self._hook: OnImport | None = None

    def start(self) -> None:
        self._save_python()
        torch = sys.modules.get("torch")
        if torch is not None:
            self._apply(torch)
        else:  # the test imports torch itself: apply then, before its own settings
            self._hook = OnImport("torch", self._imported).watch()
        seed_loaded(self.seed)  # torch too, where loaded

    def reseed(self) -> None:
        seed_loaded(self.seed)

    def stop(self) -> None:
        if self._hook is not None:
            self._hook.remove()
            self._hook = None
        for restore in reversed(self._saved):
            restore()
        self._saved.clear()

    def _save_python(self) -> None:
        state = random.getstate()
        self._saved.append(lambda: random.setstate(state))
        numpy = sys.modules.get("numpy")
        if numpy is not None:
            numpy_state = numpy.random.get_state()
            self._saved.append(lambda: numpy.random.set_state(numpy_state))

    def _apply(self, torch: ModuleType) -> None:
        """Save torch's state, then set the thread count."""
        self._saved.append(_torch_restorer(torch))
        if self.threads is not None:
            torch.set_num_threads(self.threads)

    def _imported(self, torch: ModuleType) -> None:
        """torch arrived during the test: as :meth:`start` does where it was loaded."""
        self._apply(torch)
        torch.manual_seed(self.seed)


def _torch_restorer(torch: ModuleType) -> Callable[[], None]:
    """A function that puts torch's process-wide state back as it is now."""
    threads, grad = torch.get_num_threads(), torch.is_grad_enabled()
    dtype, matmul = torch.get_default_dtype(), torch.get_float32_matmul_precision()
    deterministic = _deterministic(torch)
    rng = torch.get_rng_state()
    cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None

    def restore() -> None:
        torch.set_num_threads(threads)
        torch.set_grad_enabled(grad)
        torch.set_default_dtype(dtype)
        torch.set_float32_matmul_precision(matmul)
        # only where it changed: setting it imports torch._inductor, 1.6 s the first time
        if _deterministic(torch) != deterministic:
            torch.use_deterministic_algorithms(deterministic[0], warn_only=deterministic[1])
        torch.set_rng_state(rng)
        if cuda is not None:
            torch.cuda.set_rng_state_all(cuda)

    return restore


def _deterministic(torch: ModuleType) -> tuple[bool, bool]:
    """Whether torch uses deterministic algorithms only, and whether it only warns."""
    return (
        torch.are_deterministic_algorithms_enabled(),
        torch.is_deterministic_algorithms_warn_only_enabled(),
    )


class OnImport(importlib.abc.MetaPathFinder):
    """Calls ``before()`` when the top-level module ``name`` starts being imported, and
    ``then(module)`` once it has been, then leaves ``sys.meta_path``. It finds nothing itself:
    for ``then`` it asks the finders after it for the module's spec and wraps the loader's
    ``exec_module``."""

    def __init__(
        self,
        name: str,
        then: Callable[[ModuleType], None] | None = None,
        *,
        before: Callable[[], None] | None = None,
    ) -> None:
        self.name = name
        self.then = then
        self.before = before

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname != self.name:
            return None
        self.remove()  # one import, one call; and the other finders are asked without it
        if self.before is not None:
            self.before()
        if self.then is None:
            return None  # left to the import system as if this finder were not there
        spec = next(filter(None, (_spec(f, fullname, path, target) for f in sys.meta_path)), None)
        loader = getattr(spec, "loader", None)
        if loader is None or not hasattr(loader, "exec_module"):
            return None
        run, then = loader.exec_module, self.then

        def exec_module(module: ModuleType) -> None:
            run(module)
            then(module)

        loader.exec_module = exec_module  # this spec's own loader object, made for it
        return spec

    def watch(self) -> OnImport:
        """Put it first on ``sys.meta_path``."""
        sys.meta_path.insert(0, self)
        return self

    def remove(self) -> None:
        if self in sys.meta_path:
            sys.meta_path.remove(self)


def _spec(finder: Any, fullname: str, path: Any, target: Any) -> Any:
    find = getattr(finder, "find_spec", None)
    return None if find is None else find(fullname, path, target)
