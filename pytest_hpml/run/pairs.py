"""Head against base, as the session starts it: the first pair of processes starts while the
tests run, and each benchmark's window of rounds in a pair's process."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from ..config import markers
from ..config.resolution import Settings
from ..config.role import duty, settings

# A shared host's slow spells last up to a second, so a process of the pairs measures for at
# least this long in all, or all of --hpml-bench-time if shorter (Note [Head against base]).
PAIR_WINDOW = 1.0


def pair_window(settings: Settings, benchmarks: int) -> float:
    """Seconds of rounds a benchmark gets in each process of the pairs, with --hpml-against:
    its share of --hpml-bench-time, ten slices or more at the default bench time and pairs
    (Note [Slices])."""
    shared = settings.bench_time / (4 * settings.pairs)
    return max(shared, min(settings.bench_time, PAIR_WINDOW) / max(benchmarks, 1))


def start_pairs(config: pytest.Config, items: Sequence[pytest.Item]) -> None:
    """With --hpml-against, in the controller: start the first pair of processes on the
    benchmarks collected, while this session runs its tests (Note [Cheaper processes]); none
    where it collected none."""
    from ..bench.sides import AGAINST_KEY

    against = config.stash.get(AGAINST_KEY, None)
    tests = [item.nodeid for item in items if markers.is_benchmark(item)]
    if against is not None and duty(config).against:
        against.start_early(tests, pair_window(settings(config), len(tests)))


# The hooks that head against base does not ask: it judges each metric on its pairs' ratios, and
# times no reference workload beside them (Note [Head against base]).
UNASKED = {
    "pytest_hpml_judge_metric": "each metric is judged on its pairs' ratios",
    "pytest_hpml_reference_workload": "no reference workload is timed beside the pairs",
}


def unasked_hooks(config: pytest.Config) -> list[str]:
    """A warning for each implementation of a hook that --hpml-against does not ask, other
    than pytest-hpml's own: a conftest's judge would otherwise be passed over unsaid."""
    said = []
    for hook, why in UNASKED.items():
        for impl in getattr(config.hook, hook).get_hookimpls():
            if getattr(impl.plugin, "__name__", "").startswith("pytest_hpml."):
                continue
            said.append(f"{hook} of {impl.plugin_name} is not asked with --hpml-against: {why}")
    return said
