"""How many of the cores this process may use the host's other work left free while a
benchmark measured: a speed-up over more cores is judged only where they were (Note [Free
cores]).

Read from Linux's ``/proc``: the busy time of the usable CPUs (steal included: a hypervisor
that runs another guest takes the core as surely as a neighbour does) less the CPU time of this
process and its descendants (threads, DataLoader workers), over the measuring window. A rank
counts what started it and all its descendants instead: the test's other ranks are its own work.
"""

from __future__ import annotations

import os
import time
from typing import NamedTuple

from ..config.role import RANK_PARENT_ENV
from ..config.values import usable_cpus

# /proc/stat's fields after the CPU's name that count busy time (user nice system idle iowait
# irq softirq steal ...): idle and iowait are not busy.
_BUSY_FIELDS = (0, 1, 2, 5, 6, 7)


class Snapshot(NamedTuple):
    wall: float  # time.monotonic()
    busy: float  # seconds the usable CPUs were busy since boot
    ours: float  # CPU seconds of this process and its descendants


def snapshot() -> Snapshot | None:
    """Where the clocks stand now; None where ``/proc`` cannot tell (not Linux)."""
    try:
        busy, ours = _busy_seconds(), _tree_seconds(_root())
    except (OSError, ValueError, IndexError):
        return None
    return Snapshot(time.monotonic(), busy, ours)


def free_cores(before: Snapshot | None, after: Snapshot | None) -> float | None:
    """The usable cores that the host's other work left free on average between two
    snapshots, to two decimals; None where either is unknown or no time passed."""
    if before is None or after is None or after.wall <= before.wall:
        return None
    elapsed = after.wall - before.wall
    others = max(0.0, (after.busy - before.busy) - (after.ours - before.ours)) / elapsed
    return round(max(0.0, usable_cpus() - others), 2)


def _root() -> int:
    """The process whose descendants are this benchmark's own work."""
    parent = os.environ.get(RANK_PARENT_ENV, "")
    return int(parent) if parent.isdigit() and int(parent) > 0 else os.getpid()


def _busy_seconds() -> float:
    """Busy seconds of the CPUs this process may run on, from ``/proc/stat``."""
    usable = _usable_ids()
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    with open("/proc/stat", encoding="ascii") as stat:
        for line in stat:
            name, _, rest = line.partition(" ")
            if not name.startswith("cpu") or name == "cpu":
                continue
            if usable is not None and int(name[3:]) not in usable:
                continue
            fields = rest.split()
            total += sum(int(fields[i]) for i in _BUSY_FIELDS if i < len(fields))
    return total / tick


def _usable_ids() -> set[int] | None:
    try:
        return set(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return None


def _tree_seconds(root: int) -> float:
    """CPU seconds of ``root`` and every live descendant, each with its reaped children's."""
    children: dict[int, list[int]] = {}
    times: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as stat:
                text = stat.read()
        except OSError:  # ended since the listing
            continue
        # the fields after the command name, which may hold spaces and parentheses
        fields = text[text.rindex(")") + 2 :].split()
        pid, parent = int(entry), int(fields[1])
        children.setdefault(parent, []).append(pid)
        times[pid] = sum(int(fields[i]) for i in (11, 12, 13, 14))  # utime stime cutime cstime
    total, stack = 0, [root]
    while stack:
        pid = stack.pop()
        total += times.get(pid, 0)
        stack.extend(children.get(pid, ()))
    return total / os.sysconf("SC_CLK_TCK")
