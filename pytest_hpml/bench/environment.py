"""What each side of head against base measures with: Python, torch with its CUDA and cuDNN,
and every installed distribution's version, described by the same code in this interpreter and
in another one, and what differs between two such descriptions."""

from __future__ import annotations

import importlib
import json
import subprocess
from collections.abc import Callable, Sequence
from typing import Any

CHECK_TIMEOUT = 300.0  # seconds the base interpreter may take to import torch and the plugin
SPEAK_AFTER = 10.0  # seconds of waiting for it after which a line says what is awaited


# What a side measures with (Python, torch and its CUDA and cuDNN, every installed
# distribution's version): run in another interpreter, it imports what that side's processes
# will import first, so that an environment that cannot measure fails there, clearly, and
# prints one JSON line.
DESCRIBE = """
import json, platform, sys
from importlib import metadata


def describe():
    found = {"python": platform.python_version(), "executable": sys.executable, "packages": {}}
    for dist in metadata.distributions():
        name = dist.metadata.get("Name")
        if name:
            found["packages"][name.lower().replace("_", "-")] = dist.version
    torch = sys.modules.get("torch")
    if torch is not None:
        found["torch"] = torch.__version__
        found["cuda"] = torch.version.cuda
        cudnn = torch.backends.cudnn
        found["cudnn"] = cudnn.version() if cudnn.is_available() else None
    return found
"""


def describing(python: str, modules: Sequence[str], env: dict[str, str]) -> subprocess.Popen[str]:
    """Start describing the environment of ``python`` (see :data:`DESCRIBE`), importing
    ``modules`` first."""
    imports = "".join(f"import {m}\n" for m in modules)
    code = imports + DESCRIBE + "print(json.dumps(describe()))\n"
    return subprocess.Popen(
        [python, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )


def describe_here(modules: Sequence[str]) -> dict[str, Any] | None:
    """:data:`DESCRIBE` run in this interpreter, the head side's, once it imported
    ``modules`` (torch mostly is already, by the collection): no interpreter of its own that
    imports torch beside this one's start (Note [Cheaper processes]). None where one of them
    cannot be imported."""
    try:
        for module in modules:
            importlib.import_module(module)
    except Exception:  # the tests that need it fail, saying why
        return None
    namespace: dict[str, Any] = {}
    exec(DESCRIBE, namespace)  # the very code another interpreter runs: one description
    described: dict[str, Any] | None = namespace["describe"]()
    return described


def described(
    started: subprocess.Popen[str], waiting: Callable[[], None] = lambda: None
) -> tuple[dict[str, Any] | None, str]:
    """What :func:`describing` found, or None and why not; ``waiting`` says what is awaited,
    once it has taken :data:`SPEAK_AFTER` seconds."""
    try:
        try:
            out, err = started.communicate(timeout=SPEAK_AFTER)
        except subprocess.TimeoutExpired:
            waiting()
            out, err = started.communicate(timeout=CHECK_TIMEOUT - SPEAK_AFTER)
    except subprocess.TimeoutExpired:
        started.kill()
        started.communicate()
        return None, f"took over {CHECK_TIMEOUT:g} s"
    if started.returncode:
        return None, (err.strip().splitlines() or [f"exit {started.returncode}"])[-1]
    try:
        found = json.loads(out.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return None, "it printed no description"
    packages = found.get("packages") if isinstance(found, dict) else None
    if not isinstance(packages, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in packages.items()
    ):  # another program's JSON: what it says of its packages cannot be compared
        return None, "it printed JSON that describes no environment"
    return found, ""


def version() -> str:
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed

    try:
        return installed("pytest-hpml")
    except PackageNotFoundError:
        return "?"


def differences(base: dict[str, Any], head: dict[str, Any]) -> list[str]:
    """What differs between two sides' environments: Python, then each distribution whose
    version differs (``torch 2.14.1 -> 2.15.0``), or that one side lacks (``nni - -> 3.0``)."""
    found = []
    if base.get("python") != head.get("python"):
        found.append(f"Python {base.get('python')} -> {head.get('python')}")
    theirs, ours = base.get("packages", {}), head.get("packages", {})
    for name in sorted({*theirs, *ours}):
        if theirs.get(name) != ours.get(name):
            found.append(f"{name} {theirs.get(name, '-')} -> {ours.get(name, '-')}")
    return found
