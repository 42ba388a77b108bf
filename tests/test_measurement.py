"""Measurement, testable on the CPU: every timed round ends with the device synchronized, the
first call is reported apart from the rounds, and each round has its reference time."""

from __future__ import annotations

import time

import pytest
import torch

from pytest_hpml.bench.measure import (
    LONG_CALL,
    ONE_SAMPLE,
    PAIR_SAMPLES,
    Plan,
    measure,
    paired,
    synchronizer,
)
from pytest_hpml.bench.reference import Reference

SYNC_SECONDS = 0.002


class SlowSync:
    """A device synchronization that takes 2 ms and counts its calls."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self) -> None:
        self.calls += 1
        time.sleep(SYNC_SECONDS)


class SlowFirstCall:
    """A target whose first call does 50 ms of lazy work (compilation, autotuning...)."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self) -> int:
        self.calls += 1
        if self.calls == 1:
            time.sleep(0.05)
        return self.calls


def test_every_timed_round_includes_the_device_synchronization() -> None:
    sync = SlowSync()
    series, _ = measure({"t": lambda: None}, Plan(sync=sync, rounds=6, warmup_rounds=2))
    s = series["t"]
    assert s.iterations == 1  # one call already lasts longer than a round needs
    assert len(s.samples) == 6
    assert min(s.samples) >= SYNC_SECONDS
    # one synchronization per timed batch: first call, warm-up, each round; a call of 2 ms lasts
    # LONG_CALL rounds of pytest-benchmark's 5 us or more, so none is timed to calibrate
    assert LONG_CALL * Plan.round_time <= SYNC_SECONDS
    assert sync.calls == 1 + s.warmup_calls + len(s.samples)


def test_a_call_of_fewer_than_long_call_rounds_is_timed_to_calibrate() -> None:
    sync = SlowSync()
    plan = Plan(sync=sync, rounds=6, warmup_rounds=2, round_time=SYNC_SECONDS / 10)
    series, _ = measure({"t": lambda: None}, plan)
    s = series["t"]
    assert s.iterations == 1
    # first call, warm-up, the calibration round (a call lasts 10 rounds), each round
    assert sync.calls == 1 + s.warmup_calls + 1 + len(s.samples)


def test_one_sample_is_the_first_call_and_one_call_more() -> None:
    # The session of --hpml-against only checks that a benchmark runs (ONE_SAMPLE): no warm-up,
    # no calibration, no estimate.
    sync = SlowSync()
    series, _ = measure({"t": lambda: None}, Plan(sync=sync, **ONE_SAMPLE))
    s = series["t"]
    assert (len(s.samples), s.warmup_calls, s.iterations) == (1, 0, 1)
    assert sync.calls == 2


def test_a_round_of_many_calls_synchronizes_once() -> None:
    sync = SlowSync()
    plan = Plan(sync=sync, rounds=4, warmup_rounds=1, iterations=10)
    series, _ = measure({"t": lambda: None}, plan)
    assert sync.calls == 1 + 1 + 4
    assert min(series["t"].samples) >= SYNC_SECONDS / 10


def test_synchronizer_on_cpu_is_a_no_op(monkeypatch: pytest.MonkeyPatch) -> None:
    def forbidden(*args: object) -> None:
        raise AssertionError("synchronized a CUDA device on the CPU")

    monkeypatch.setattr(torch.cuda, "synchronize", forbidden)
    if torch.cuda.is_initialized():
        pytest.skip("CUDA is initialized in this process")
    assert synchronizer(None)() is None
    assert synchronizer(torch.device("cpu"))() is None


def test_slow_first_call_is_reported_apart_and_not_in_the_samples() -> None:
    target = SlowFirstCall()
    series, results = measure({"t": target}, Plan(rounds=5))
    s = series["t"]
    assert s.first_call >= 0.05
    assert len(s.samples) == 5
    assert max(s.samples) < 0.05
    assert s.warmup_calls >= 3  # called until three calls in a row agree
    assert results["t"] == target.calls  # the last call's result


def test_variants_are_measured_in_the_same_rounds_with_their_reference() -> None:
    plan = Plan(rounds=5, warmup_rounds=1, reference=Reference())
    series, _ = measure({"a": lambda: 1, "b": lambda: 2}, plan)
    assert {n: len(s.samples) for n, s in series.items()} == {"a": 5, "b": 5}
    assert series["a"].reference == series["b"].reference  # the same reference run per round
    assert len(series["a"].reference) == 5
    assert min(series["a"].reference) > 0


def test_storage_tracker_counts_live_tensor_bytes_at_their_peak() -> None:
    from pytest_hpml.bench.memory import StorageTracker

    with StorageTracker() as tracker:
        first = torch.ones(1000)  # 4000 B
        second = first + 1  # 8000 B live
        del first  # 4000 B live
        third = second * 2  # 8000 B live again
    assert (tracker.peak, tracker.live) == (8000, 8000)
    assert third.sum().item() == 4000


class CountingClock:
    """A clock that advances 10 ms each time it is read: rounds counted, not timed."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        self.now += 0.01
        return self.now


@pytest.mark.parametrize("budget", [0.5, 1.0, 2.0])
def test_the_rounds_fill_the_budget_and_no_more(budget: float) -> None:
    clock = CountingClock()
    plan = Plan(budget=budget, timer=clock, warmup_time=0.0, min_round_time=0.0)
    series, _ = measure({"f": lambda: None}, plan)
    # A round reads the clock three times (the deadline, then before and after the call), so
    # 30 ms a round: the budget holds budget / 0.03 rounds (give or take the round that
    # crosses the deadline and the clock reads of setting it).
    rounds = len(series["f"].samples)
    assert abs(rounds - budget / 0.03) <= 2


def test_slices_pause_between_samples_and_the_pause_does_not_count() -> None:
    """Every slice of measuring, the plan's ``between`` runs between two samples (a pair's
    process passes its turn there, Note [Slices]); the time it takes is added to the budget,
    so the rounds are as many as without pauses."""
    clock = CountingClock()
    pauses = []

    def between() -> None:
        pauses.append(clock.now)
        for _ in range(100):  # the other process measures: a second on this clock
            clock()

    plan = Plan(
        budget=1.0, timer=clock, warmup_time=0.0, min_round_time=0.0, between=between, slice=0.1
    )
    series, _ = measure({"f": lambda: None}, plan)
    # a round reads the clock four times with slices (the slice's end too): 40 ms a round
    assert abs(len(series["f"].samples) - 1.0 / 0.04) <= 2
    assert 6 <= len(pauses) <= 10  # after each 0.1 s (3 rounds, 0.12 s) of the 1 s budget
    assert all(later - earlier >= 1.1 for earlier, later in zip(pauses, pauses[1:]))


@pytest.mark.parametrize("pair", [False, True], ids=["alone", "paired"])
def test_a_pairs_process_takes_three_samples_of_a_long_call_and_warms_up_within_its_window(
    pair: bool,
) -> None:
    """A call of 100 ms with a window of 0.2 s: a process of the pairs takes 3 samples and
    warms up for the window, two calls; alone, 5 samples, and it warms up until its last three
    calls agree, within half a second (Note [Samples and rounds], pairs)."""
    clock = CountingClock()

    def long_call() -> None:  # ten reads: 100 ms on the counting clock
        for _ in range(10):
            clock()

    schedule = paired(0.2) if pair else {}
    plan = Plan(budget=0.2, timer=clock, min_round_time=0.0, **schedule)
    series, _ = measure({"f": long_call}, plan)
    s = series["f"]
    assert len(s.samples) == (PAIR_SAMPLES if pair else 5)
    assert s.warmup_calls == (2 if pair else 3)


def test_a_benchmark_with_enough_samples_stops_before_its_budget() -> None:
    clock = CountingClock()
    plan = Plan(budget=100.0, timer=clock, warmup_time=0.0, min_round_time=0.0, enough_samples=40)
    series, _ = measure({"f": lambda: None}, plan)
    assert len(series["f"].samples) == 40
    assert clock.now < 5  # far from the 100 s budget: 40 samples of 30 ms and the set-up


def test_short_rounds_are_pytest_benchmarks_and_a_sample_gathers_them() -> None:
    clock = CountingClock()  # a call "takes" 10 ms: a sample of 45 ms needs 5 rounds
    plan = Plan(budget=1.0, timer=clock, warmup_time=0.0, min_round_time=0.045, round_time=0.005)
    series, _ = measure({"f": lambda: None}, plan)
    s = series["f"]
    assert (s.iterations, s.rounds_per_sample) == (1, 5)
    assert len(s.rounds) == 5 * len(s.samples)
    assert s.samples[0] == pytest.approx(sum(s.rounds[:5]) / 5)


class ClockedReference:
    """A reference workload that "takes" as long as two reads of the counting clock."""

    repeat = 1

    def time(self, timer: CountingClock) -> float:
        start = timer()
        return timer() - start


@pytest.mark.parametrize("share", [0.2, 0.5])
def test_the_reference_workload_keeps_to_its_share_of_the_time(share: float) -> None:
    clock = CountingClock()
    plan = Plan(
        budget=3.0,
        timer=clock,
        warmup_time=0.0,
        min_round_time=0.0,
        reference=ClockedReference(),
        reference_share=share,
    )
    start = clock.now
    series, _ = measure({"f": lambda: None}, plan)
    s = series["f"]
    spent = clock.now - start
    assert s.references_timed > 1
    assert s.reference_seconds <= share * spent + 0.01  # + the run that starts the rounds
    assert len(s.reference) == len(s.samples)  # every sample has a reference time
