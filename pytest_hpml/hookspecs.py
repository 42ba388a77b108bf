"""Extension points of pytest-hpml: implement these in a ``conftest.py`` or a plugin.

Each is ``firstresult``: the first implementation that returns something other than None wins,
and pytest-hpml's own implementation runs last, so a team's answer replaces it (as
pytest-timeout's ``pytest_timeout_set_timer`` does). Types are named, not imported: this
module is read at start-up and must stay free of torch.
"""

from __future__ import annotations

from typing import Any

import pluggy
import pytest

hookspec = pluggy.HookspecMarker("pytest")


@hookspec(firstresult=True)
def pytest_hpml_reference_workload(config: pytest.Config, device: Any, sync: Any) -> Any:
    """The reference workload timed before each benchmark round on ``device``.

    Return an object with ``time(timer) -> float`` (seconds of one run of the workload, the
    device synchronized through ``sync()``) and ``repeat`` (runs per timing), or None to leave
    it to the next implementation. The default is a small convolution, matmul and MLP training
    step (Note [Reference workload] in docs/notes.md). Called only once torch is imported.
    """


@hookspec(firstresult=True)
def pytest_hpml_fingerprint(config: pytest.Config) -> Any:
    """This machine's :class:`~pytest_hpml.hardware.fingerprint.Fingerprint`, which names the
    file its time baselines are stored in. Return one to key baselines your own way (a CI
    runner class, say), or None. ``--hpml-machine`` names it afterwards."""


@hookspec(firstresult=True)
def pytest_hpml_judge_metric(
    config: pytest.Config,
    test: str,
    name: str,
    record: dict[str, Any],
    baseline: dict[str, Any] | None,
    threshold: float,
) -> Any:
    """The verdict on one metric of ``test``: a
    :class:`~pytest_hpml.model.Comparison`, or None to leave it to the next
    implementation. ``record`` and ``baseline`` are metric records in their plain-dict form
    (:mod:`pytest_hpml.bench.metrics`); ``threshold`` is the one in force for the test."""


@hookspec(firstresult=True)
def pytest_hpml_peak_flops(config: pytest.Config, device: Any, precision: str) -> Any:
    """The dense peak FLOP/s of ``device`` (a ``torch.device``) in ``precision`` (``fp32``,
    ``tf32``, ``bf16``, ``fp16``, ``fp8``; another dtype's name, such as ``fp64``, where the
    step's FLOPs were mostly in it), which a benchmark's ``mfu`` metric divides its FLOP/s by;
    or None to leave it to the next implementation. The default reads pytest-hpml's table of
    GPUs (:mod:`pytest_hpml.hardware.peaks`) and knows no CPU (Note [MFU] in docs/notes.md).
    ``--hpml-peak-flops``, where given, is used instead of asking. Called only once torch is
    imported, after a benchmark has run on ``device``."""
