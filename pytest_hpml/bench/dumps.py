"""callgrind's dumps read back: the instructions of each function, with the functions that run
from no file (code a library generates at run time) pooled as one (Note [Instruction counts])."""

from __future__ import annotations

import bisect
import os
import re
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from .metrics import Instructions

TOP_FUNCTIONS = 40  # functions kept per benchmark to say where a change went


# Code in no file: what a library generates at run time (oneDNN's kernels), pooled as one
# function, since its address differs from process to process (Note [Instruction counts]).
RUN_TIME_CODE = "(code generated at run time)"
NO_OBJECT = "???"  # callgrind's object for code outside every object it read symbols of


@dataclass(frozen=True)
class MappedFile:
    """Addresses ``start`` to ``end`` of a process hold part of ``file``, whose first byte is at
    ``base``: an address less ``base`` is the offset tools such as addr2line take."""

    start: int
    end: int
    file: str  # the file's name, without its directory
    base: int


def mapped_files(maps: Iterable[str]) -> list[MappedFile]:
    """The files mapped in a process, in order of address, from its ``/proc/<pid>/maps``.
    Anonymous memory, where code generated at run time lives, is left out."""
    found: list[MappedFile] = []
    bases: dict[str, int] = {}  # a file's base: where its mapping from offset 0 starts
    for line in maps:
        fields = line.split(maxsplit=5)
        path = fields[5].strip().removesuffix(" (deleted)") if len(fields) == 6 else ""
        if not path.startswith("/") or path.startswith("/memfd:"):
            continue  # anonymous, [heap], [stack]; memfd: code double-mapped by a JIT
        start, end = (int(address, 16) for address in fields[0].split("-"))
        offset = int(fields[2], 16)
        if offset == 0:
            bases[path] = start
        base = bases.get(path, start - offset)
        found.append(MappedFile(start, end, os.path.basename(path), base))
    return found


def _mapped(files: Sequence[MappedFile], address: int) -> MappedFile | None:
    """The file mapped at ``address``, if any (``files`` in order of address)."""
    at = bisect.bisect_right([mapped.start for mapped in files], address) - 1
    return files[at] if at >= 0 and address < files[at].end else None


_NAMED = re.compile(r"\((\d+)\)(?: (.*))?")
# callgrind's name for code without a symbol: its address less its object's load address, and
# the section when not code (" [PLT]": a library's stubs that call into another)
_UNNAMED = re.compile(r"0x([0-9a-f]+)( \[\w+\])?")


def parse(lines: Iterable[str], files: Sequence[MappedFile] = ()) -> tuple[int, dict[str, int]]:
    """The total of a callgrind dump (its only event, instructions) and each function's own
    instructions (what it ran itself, its callees' excluded), by :func:`function_key`;
    ``files``: those mapped in the process when it dumped (:func:`mapped_files`)."""
    names: dict[str, str] = {}  # compressed names of functions (fn=, cfn=)
    objects: dict[str, str] = {}  # and of objects (ob=, cob=): a numbering of their own
    own: dict[str, int] = defaultdict(int)
    function, where, total, inclusive = None, NO_OBJECT, 0, False
    for line in lines:
        first = line[:1]
        if first.isdigit() or first in "+-*":
            if inclusive:  # the line after calls=: a callee's cost, not this function's own
                inclusive = False
            elif function is not None:
                own[function] += int(line.split()[-1])
        elif line.startswith("fn="):
            function = function_key(_name(line[3:].strip(), names), where, files)
        elif line.startswith("cfn="):
            _name(line[4:].strip(), names)  # defines a compressed name used later
        elif line.startswith("ob="):  # the object of the fn= lines after it
            where = _expand(line[3:].strip(), objects)
        elif line.startswith("cob="):
            _expand(line[4:].strip(), objects)
        elif line.startswith("calls="):
            inclusive = True
        elif line.startswith(("summary:", "totals:")):
            total = int(line.split()[1])
    return total or sum(own.values()), dict(own)


def function_key(name: str, where: str, files: Sequence[MappedFile] = ()) -> str:
    """How function ``name`` of object ``where`` is known in a profile, the same in every
    process: its symbol; without one, its object and its offset there
    (``libtorch_cpu.so+0xe1bcf70``); code in no file, :data:`RUN_TIME_CODE`."""
    unnamed = _UNNAMED.fullmatch(name)
    if unnamed is None:
        return name
    address, section = int(unnamed[1], 16), unnamed[2] or ""
    if where != NO_OBJECT:  # callgrind's number is the offset in the object already
        return f"{os.path.basename(where)}+{address:#x}{section}"
    # outside the objects callgrind read symbols of, its number is the address itself: a
    # library's stubs outside its text (PLT), or code written at run time into anonymous memory
    mapped = _mapped(files, address)
    if mapped is None:
        return RUN_TIME_CODE
    return f"{mapped.file}+{address - mapped.base:#x}{section}"


def _expand(text: str, names: dict[str, str]) -> str:
    """A name through callgrind's name compression: ``(12) name`` defines 12, ``(12)`` uses it."""
    found = _NAMED.fullmatch(text)
    if found is None:
        return text
    number, name = found.groups()
    if name is not None:
        names[number] = name
    return names.get(number, text)


def _name(text: str, names: dict[str, str]) -> str:
    """A function's name (:func:`_expand`), a recursion level's suffix (``'2``) dropped."""
    return re.sub(r"'\d+$", "", _expand(text, names))


def top(functions: Mapping[str, int], calls: int, keep: int = TOP_FUNCTIONS) -> dict[str, int]:
    """The ``keep`` functions with the most instructions, per call; the rest as one."""
    ranked = sorted(functions.items(), key=lambda item: (-item[1], item[0]))
    kept = {name: round(cost / calls) for name, cost in ranked[:keep]}
    rest = sum(cost for _, cost in ranked[keep:])
    if rest:
        kept[Instructions.OTHERS] = round(rest / calls)
    return kept
