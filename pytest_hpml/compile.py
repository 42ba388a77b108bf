"""The ``backend`` fixture's value: one ``torch.compile`` backend (and mode) a test runs with."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any, Callable, TypeVar

T = TypeVar("T", bound=Callable[..., Any])

# Accepted besides what torch._dynamo.list_backends() reports (it hides debug backends).
ALWAYS_KNOWN = ("eager", "aot_eager")


@dataclass(frozen=True)
class CompileBackend:
    """A backend as given to ``--hpml-backend``: ``eager``, ``inductor:max-autotune``, ..."""

    spec: str

    def __str__(self) -> str:
        return self.spec

    @property
    def name(self) -> str:
        return self.spec.partition(":")[0]

    @property
    def mode(self) -> str | None:
        return self.spec.partition(":")[2] or None

    @property
    def compiles(self) -> bool:
        """False for ``eager``, which means the model runs uncompiled."""
        return self.name != "eager"

    def compile(self, fn: T, **kwargs: Any) -> T:
        """``torch.compile`` ``fn`` (a module or function) with this backend; eager returns it."""
        if not self.compiles:
            return fn
        import torch

        if self.mode:
            kwargs.setdefault("mode", self.mode)
        return torch.compile(fn, backend=self.name, **kwargs)


def reset_dynamo() -> None:
    """Drop compiled graphs and guards so that one test's compilation cannot leak into the next."""
    dynamo = sys.modules.get("torch._dynamo")
    if dynamo is not None:
        dynamo.reset()


def unknown_backends(specs: tuple[str, ...]) -> tuple[list[str], list[str]]:
    """The names in ``specs`` that torch does not know, and the usual choices to offer instead."""
    names = {spec.partition(":")[0] for spec in specs} - {"eager"}
    if not names:
        return [], list(ALWAYS_KNOWN)
    from torch._dynamo import list_backends

    # Debug backends are valid but hidden by default; accept them, offer the usual ones.
    valid = set(list_backends(exclude_tags=())) | set(ALWAYS_KNOWN)
    return sorted(names - valid), sorted(set(list_backends()) | set(ALWAYS_KNOWN))
