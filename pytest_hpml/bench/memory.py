"""Peak tensor memory on any device, counted the same way on every machine."""

from __future__ import annotations

import weakref
from typing import Any

import torch

from .. import _compat


def tensors(value: Any) -> list[Any]:
    """The tensors in an operator's output (a tensor, or tuples and lists of them)."""
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (tuple, list)):
        return [t for v in value for t in tensors(v)]
    return []


class Dispatching(_compat.dispatch_mode_class()):  # type: ignore[misc]
    """A torch dispatch mode that hands every operator to :meth:`dispatch`."""

    def dispatch(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        return func(*args, **kwargs)

    def __torch_dispatch__(
        self,
        func: Any,
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        return self.dispatch(func, args, kwargs or {})


class StorageTracker(Dispatching):
    """Counts the bytes of tensor storages created by ops while active, freed ones subtracted.

    torch keeps one Python object per storage while it lives, so a weak reference to it says
    when the memory is released, also for tensors that autograd holds for backward.
    """

    def __init__(self) -> None:
        super().__init__()
        self.live = 0
        self.peak = 0
        self.allocations = 0  # storages created
        self.allocated_bytes = 0  # and their bytes, freed ones included
        self._tracked: dict[int, weakref.finalize[Any, Any]] = {}

    def _release(self, key: int, size: int) -> None:
        self.live -= size
        self._tracked.pop(key, None)

    def dispatch(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """Run an operator, counting what it allocated (a subclass counts more)."""
        out = func(*args, **kwargs)
        self.track(out)
        return out

    def track(self, out: Any) -> None:
        """Count the storages of an operator's output that were not there before."""
        for value in tensors(out):
            if value.device.type == "meta":
                continue
            storage = value.untyped_storage()
            key = id(storage)
            if key not in self._tracked:
                size = storage.nbytes()
                self.allocations += 1
                self.allocated_bytes += size
                self.live += size
                self.peak = max(self.peak, self.live)
                self._tracked[key] = weakref.finalize(storage, self._release, key, size)

    def __exit__(self, *exc: Any) -> None:
        for finalizer in self._tracked.values():
            finalizer.detach()  # storages outliving the call must not touch a finished count
        self._tracked.clear()
        super().__exit__(*exc)
