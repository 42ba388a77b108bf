"""Progress lines of the long work after the tests (``pytest_hpml.config.progress``), rendered
through a real terminal reporter writing to a string: what a terminal and what a log get.

The stages that use them are run for real in tests/test_against.py and tests/test_processes.py;
here a clock that moves only when told makes every line exact.
"""

from __future__ import annotations

import io
import itertools
import time

import pytest

from pytest_hpml.config.progress import Progress, plural, seconds


class Terminal(io.StringIO):
    """What a terminal receives: a stream that says it is one."""

    def isatty(self) -> bool:
        return True


class Clock:
    """Seconds that move only when set."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def reporting(pytester: pytest.Pytester, stream: io.StringIO, *args: str) -> pytest.Config:
    """A configured session (pytest-hpml's plugin included) whose terminal reporter writes to
    ``stream``, in colour as a terminal would get it."""
    config = pytester.parseconfigure("--color=yes", *args)
    manager = config.pluginmanager
    manager.unregister(manager.get_plugin("terminalreporter"))
    manager.register(pytest.TerminalReporter(config, stream), "terminalreporter")
    return config


def pairs(config: pytest.Config, clock: Clock, total: int = 3, **more: object) -> Progress:
    return Progress(
        config, "pairs", total, one="pair", doing="measuring pairs", clock=clock, **more
    )


def test_a_terminal_gets_one_line_rewritten_in_place_and_completed_at_the_end(
    pytester: pytest.Pytester,
) -> None:
    terminal, clock = Terminal(), Clock()
    config = reporting(pytester, terminal)
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    reporter.write("test_inner.py ..")  # the last test line, left open as pytest leaves it
    with pairs(config, clock, tick=None) as progress:
        progress.step(0, "base then head")
        clock.now += 12
        progress.step(1, "head then base")
        clock.now += 12
        progress.step(2, "base then head")
        clock.now += 11
        progress.step(3)
    # each line blanks what is left of the longer one before it
    pad, completed_pad = " " * (56 - 44), " " * (44 - 28)
    assert terminal.getvalue() == (
        "test_inner.py ..\n"
        "\rhpml: pairs 0/3, base then head, 0 s so far"
        "\rhpml: pairs 1/3, head then base, 12 s so far, ~24 s left"
        "\rhpml: pairs 2/3, base then head, 24 s so far, ~12 s left"
        f"\rhpml: pairs 3/3, base then head, 35 s so far{pad}"
        # completed, and ended: what follows starts on a line of its own
        f"\rhpml: pairs 3/3 done in 35 s{completed_pad}\n"
    )
    assert config.get_terminal_writer().width_of_current_line == 0


def test_the_live_line_is_cut_to_the_terminal_and_its_clock_runs_between_steps(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "40")
    terminal = Terminal()
    config = reporting(pytester, terminal)
    ticks = itertools.count(1000)  # a second later at every reading
    with pairs(config, lambda: next(ticks), total=5, tick=0.001) as progress:
        progress.step(0, "base then head")
        deadline = time.monotonic() + 60
        while "3 s so" not in terminal.getvalue() and time.monotonic() < deadline:
            time.sleep(0.01)
    lines = terminal.getvalue().split("\r")[1:]
    assert lines[:3] == [
        "hpml: pairs 0/5, base then head, 0 s so",
        "hpml: pairs 0/5, base then head, 1 s so",
        "hpml: pairs 0/5, base then head, 2 s so",
    ]
    assert lines[-1].startswith("hpml: pairs 0/5 done in ")
    assert lines[-1].endswith("\n")
    assert all(len(line.rstrip("\n")) == 39 for line in lines[:-1])


def test_a_log_gets_plain_lines_at_most_one_every_ten_seconds_and_the_last_step(
    pytester: pytest.Pytester,
) -> None:
    log, clock = io.StringIO(), Clock()
    config = reporting(pytester, log)
    with pairs(config, clock, total=5) as progress:
        for done, at in enumerate([0, 4, 8, 13, 15, 30]):
            clock.now = 1000 + at
            progress.step(done, "base then head", f"{done * 10} of 86 settled" if done else None)
    assert log.getvalue().splitlines() == [
        "hpml: measuring pairs",
        # 4 and 8 s: less than 10 s after the first
        "hpml: pair 3 of 5 done, 30 of 86 settled (13 s; ~9 s left)",
        # 15 s: 2 s after the last line; the last step always
        "hpml: pair 5 of 5 done, 50 of 86 settled (30 s)",
    ]


def test_a_stage_that_ends_early_says_why_on_a_terminal_and_in_a_log(
    pytester: pytest.Pytester,
) -> None:
    """Pairs that stop at a look (Note [Adaptive pairs]): the live line is completed with the
    reason, and a log, whose last plain line may be seconds old, gets it as a line of its own."""
    terminal, log, clock = Terminal(), io.StringIO(), Clock()
    for stream in (terminal, log):
        config = reporting(pytester, stream)
        with pairs(config, clock, total=7, tick=None) as progress:
            progress.step(0, "base then head")
            clock.now += 12
            progress.step(3)
            progress.close("every verdict settled after 3 of at most 7 pairs")
    assert terminal.getvalue().endswith(
        "\rhpml: every verdict settled after 3 of at most 7 pairs in 12 s\n"
    )
    assert log.getvalue().splitlines()[-1] == (
        "hpml: every verdict settled after 3 of at most 7 pairs (12 s)"
    )


def test_steps_done_before_the_stage_count_but_are_not_timed(pytester: pytest.Pytester) -> None:
    log, clock = io.StringIO(), Clock()
    config = reporting(pytester, log)
    doing = "measuring 1 benchmark in 2 more fresh processes, 3 in all"
    with Progress(config, "processes", 3, one="process", doing=doing, done=1, clock=clock) as p:
        p.step(1)
        clock.now += 11
        p.step(2)
        clock.now += 11
        p.step(3)
    assert log.getvalue().splitlines() == [
        f"hpml: {doing}",
        "hpml: process 2 of 3 done (11 s; ~11 s left)",
        "hpml: process 3 of 3 done (22 s)",
    ]


@pytest.mark.parametrize("stream", [Terminal, io.StringIO], ids=["terminal", "log"])
def test_nothing_with_qq_in_a_process_that_does_not_report_or_before_the_first_step(
    pytester: pytest.Pytester, stream: type[io.StringIO]
) -> None:
    quiet, worker, idle = stream(), stream(), stream()
    xdist_worker = reporting(pytester, worker)
    xdist_worker.workerinput = {"workerid": "gw0"}  # as pytest-xdist marks its workers
    for config in (reporting(pytester, quiet, "-qq"), xdist_worker):
        with pairs(config, Clock(), tick=None) as progress:
            progress.step(0, "base then head")
            progress.step(3)
    with pairs(reporting(pytester, idle), Clock(), tick=None):
        pass  # a stage that found nothing to do
    assert [quiet.getvalue(), worker.getvalue(), idle.getvalue()] == ["", "", ""]


def test_durations_and_counts_read_as_said() -> None:
    assert [seconds(s) for s in (0.2, 41.4, 59.6, 110, 3725)] == [
        "0 s",
        "41 s",
        "1 min 0 s",
        "1 min 50 s",
        "62 min 5 s",
    ]
    assert plural(1, "pair") == "1 pair"
    assert plural(2, "more fresh process") == "2 more fresh processes"
