"""Learning-rate schedules of the lectures and the MXNet talk, as pure functions of the step:
the exact sequences their definitions give, and the same rates as torch.optim.lr_scheduler.

Steps count from 0, as torch's schedulers count ``scheduler.step()`` calls. The talk's factor
schedules halve the rate, and powers of two are exact in floating point, so their sequences are
compared with ``==``.
"""

from __future__ import annotations

from typing import Callable

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.optim import lr_scheduler

from suites.optimizers import (
    exponential,
    factor_schedule,
    multi_factor_schedule,
    multi_step,
    step_decay,
)

Schedule = Callable[[int], float]
SchedulerFactory = Callable[[torch.optim.Optimizer], lr_scheduler.LRScheduler]


def test_factor_schedule_halves_the_rate_every_250_steps() -> None:
    steps = [0, 249, 250, 499, 500, 749, 750, 1000]
    assert [factor_schedule(t, 1.0) for t in steps] == [1, 1, 0.5, 0.5, 0.25, 0.25, 0.125, 1 / 16]


def test_factor_schedule_stops_at_its_floor() -> None:
    floor = 2.0**-5
    assert factor_schedule(10_000, 1.0, stop_factor_lr=floor) == floor
    assert factor_schedule(999, 1.0, stop_factor_lr=floor) == 0.125


def test_multi_factor_schedule_halves_the_rate_at_250_750_and_900() -> None:
    steps = [0, 249, 250, 749, 750, 899, 900, 10_000]
    expected = [1, 1, 0.5, 0.5, 0.25, 0.25, 0.125, 0.125]
    assert [multi_factor_schedule(t, 1.0) for t in steps] == expected


def test_step_decay_divides_by_10_after_n_steps_and_again_after_m() -> None:
    n, m = 30, 80
    rates = [multi_step(t, 0.1, [n, m]) for t in range(100)]
    assert rates[:n] == [0.1] * n
    assert rates[n:m] == pytest.approx([0.01] * (m - n), rel=1e-12)
    assert rates[m:] == pytest.approx([0.001] * (100 - m), rel=1e-12)


def torch_rates(make: SchedulerFactory, base_lr: float, steps: int) -> list[float]:
    """The rate torch's scheduler gives at each of ``steps`` steps, counted from 0."""
    param = torch.zeros(1, requires_grad=True)
    optimizer = torch.optim.SGD([param], lr=base_lr)
    scheduler = make(optimizer)
    rates = []
    for _ in range(steps):
        rates.append(optimizer.param_groups[0]["lr"])
        optimizer.step()  # no gradient: nothing moves, but the scheduler sees a step
        scheduler.step()
    return rates


def assert_same_rates(ours: Schedule, make: SchedulerFactory, base_lr: float, steps: int) -> None:
    # torch multiplies the rate step by step; the formulas raise gamma to a power: rounding apart.
    expected = torch_rates(make, base_lr, steps)
    assert [ours(t) for t in range(steps)] == pytest.approx(expected, rel=1e-12, abs=0.0)


def test_the_talks_factor_schedules_are_torchs_step_and_multistep_lr() -> None:
    steps = 1200
    rates = torch_rates(lambda o: lr_scheduler.StepLR(o, step_size=250, gamma=0.5), 1.0, steps)
    assert [factor_schedule(t, 1.0) for t in range(steps)] == rates
    rates = torch_rates(
        lambda o: lr_scheduler.MultiStepLR(o, milestones=[250, 750, 900], gamma=0.5), 1.0, steps
    )
    assert [multi_factor_schedule(t, 1.0) for t in range(steps)] == rates


BASE_LR = st.floats(1e-4, 1.0)
GAMMA = st.floats(0.1, 0.99)
SCHEDULE_EXAMPLES = settings(max_examples=20, deadline=None)


@SCHEDULE_EXAMPLES
# At least 10 steps between decays: at most 30 in 300 steps, so no rate becomes subnormal.
@given(base_lr=BASE_LR, step_size=st.integers(10, 100), gamma=GAMMA)
def test_step_decay_matches_steplr(base_lr: float, step_size: int, gamma: float) -> None:
    assert_same_rates(
        lambda t: step_decay(t, base_lr, step_size, gamma),
        lambda o: lr_scheduler.StepLR(o, step_size=step_size, gamma=gamma),
        base_lr,
        300,
    )


@SCHEDULE_EXAMPLES
@given(
    base_lr=BASE_LR,
    milestones=st.lists(st.integers(1, 299), min_size=1, max_size=5, unique=True),
    gamma=GAMMA,
)
def test_multi_step_matches_multisteplr(
    base_lr: float, milestones: list[int], gamma: float
) -> None:
    assert_same_rates(
        lambda t: multi_step(t, base_lr, milestones, gamma),
        lambda o: lr_scheduler.MultiStepLR(o, milestones=milestones, gamma=gamma),
        base_lr,
        300,
    )


@SCHEDULE_EXAMPLES
@given(base_lr=BASE_LR, gamma=st.floats(0.9, 0.9999))
def test_exponential_decay_matches_exponentiallr(base_lr: float, gamma: float) -> None:
    assert_same_rates(
        lambda t: exponential(t, base_lr, gamma),
        lambda o: lr_scheduler.ExponentialLR(o, gamma=gamma),
        base_lr,
        300,
    )
