"""The end of a session with benchmarks: measure again or in pairs, count instructions,
control false alarms, record baselines and set the exit status. The words come from the
``Reporting`` the plugin passes in (``report/summary.py``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pytest

from .. import _compat
from .session import Verdicts


@dataclass(frozen=True)
class Reporting:
    """What the end of a session asks of ``report/``: write the report files, keep what could
    not be written, and the failures that pytest's last line counts."""

    write: Callable[[Verdicts], None]
    kept: Callable[[Verdicts], str]  # the file that keeps the measurements
    last_line: Callable[[Verdicts], dict[str, list[pytest.TestReport]]]


def finish(session: pytest.Session, verdicts: Verdicts, reporting: Reporting) -> None:
    """Measure again in fresh processes, write the reports (before recording: they show what
    the run was judged against), record baselines, and fail the session on a regression."""
    measuring = (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED)
    if session.exitstatus in measuring:
        if verdicts.against is not None:
            verdicts.measure_against()
        else:
            verdicts.measure_again()
    # after the times are judged: --hpml-instructions=changed counts where they did not pass
    if session.exitstatus in measuring:  # unless Ctrl-C stopped the measuring
        verdicts.count_instructions()
    verdicts.control_false_alarms()
    reporting.write(verdicts)
    if verdicts.recording:
        verdicts.written = verdicts.write()
    if verdicts.unwritten:  # nothing measured is lost: kept where it can be written
        kept = reporting.kept(verdicts)
        verdicts.errors += [
            f"{what}; the measurements are kept in {kept}" for what in verdicts.unwritten
        ]
    if verdicts.failing and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    if verdicts.failing and verdicts.duty.reports:
        _compat.fail_in_last_line(session.config, reporting.last_line(verdicts))
