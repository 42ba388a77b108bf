"""The one writer of pytest-hpml's files: reports, baselines, the command's outputs
(Note [Files]).

- A regular file, or a new one, is replaced atomically (a temporary file renamed over it), so a
  reader sees the old file or the new one; it keeps the mode it had.
- A stream (the standard output and error, ``/dev/fd/N``, a character device such as
  ``/dev/null``, a FIFO) is written in place, appended to: renaming a file over it would turn
  ``/dev/null`` into a regular file (as root), or replace the log that ``> log.txt`` redirected
  the standard output to.
- A read-only file is not replaced, and a link is followed only to a file inside the project's
  root: an output inside the project never rewrites a file outside it.
- A file added to an append-only store (:func:`add_new`) is written whole under a temporary
  name in its directory, then linked to a name no other file has: it is never overwritten,
  and a reader never sees it half written (Note [History]).
"""

from __future__ import annotations

import contextlib
import datetime
import errno
import os
import re
import stat
import sys
import tempfile
import time
import uuid
from pathlib import Path

# Names of this process's own streams: written through, never replaced.
_STREAMS = re.compile(r"/dev/(stdout|stderr|fd/\d+)|/proc/(self|\d+)/fd/\d+")


class Refused(OSError):
    """An output pytest-hpml will not write; the message says why and what to do."""


def is_stream(path: Path) -> bool:
    """Whether ``path`` is written in place: a standard stream, a device or a FIFO."""
    if _STREAMS.fullmatch(os.path.abspath(path)):
        return True
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False
    return stat.S_ISCHR(mode) or stat.S_ISFIFO(mode)


def problem(path: Path, root: Path | None = None) -> str | None:
    """Why ``path`` cannot be written as an output, or None; ``root``: the project's root, out
    of which no link inside it is followed."""
    if is_stream(path):
        return None
    if looping(path) or looping(path.parent):
        return "leads into a symbolic link loop"
    if path.is_dir():
        return "is a directory; name a file in it"
    if path.exists() and not path.is_file():
        return "is not a regular file, a device or a FIFO"
    linked = outside(path, root)
    if linked:
        return linked
    if path.exists():
        return _read_only(Path(os.path.realpath(path)))
    return creatable(Path(os.path.realpath(path)).parent)


def outside(path: Path, root: Path | None) -> str | None:
    """A path inside ``root`` that links (itself or a folder of it) to a place outside it."""
    if root is None:
        return None
    given, real = Path(os.path.abspath(path)), Path(os.path.realpath(path))
    base = Path(os.path.realpath(root))
    if _inside(given, Path(os.path.abspath(root))) and not _inside(real, base):
        return (
            f"leads through a link to {real}, outside the project ({base}); pytest-hpml writes "
            "through links only inside it: name the target itself if it is meant"
        )
    return None


def _inside(path: Path, directory: Path) -> bool:
    return path == directory or directory in path.parents


def inside(path: Path, directory: Path) -> bool:
    """Whether ``path``'s real place lies in ``directory``'s, links followed."""
    return _inside(Path(os.path.realpath(path)), Path(os.path.realpath(directory)))


def _read_only(path: Path) -> str | None:
    mode = path.stat().st_mode
    if not os.access(path, os.W_OK) or not mode & 0o222:  # root may write a 0444 file: not here
        return f"is read-only (mode {stat.S_IMODE(mode):04o}); pytest-hpml does not replace it"
    return None


def looping(path: Path) -> bool:
    """Whether ``path`` leads into a loop of symbolic links (it neither exists nor can be made)."""
    try:
        os.stat(path)
    except OSError as exc:
        return exc.errno == errno.ELOOP
    return False


def creatable(directory: Path) -> str | None:
    """Why ``directory`` cannot be made or written, or None."""
    existing = directory
    while not existing.exists():
        if looping(existing):
            return f"cannot be created: {existing} is a symbolic link loop"
        existing = existing.parent
    if not existing.is_dir():
        return f"cannot be created: {existing} is a file"
    if not os.access(existing, os.W_OK):
        return f"cannot be written: {existing} is read-only"
    return None


def write(path: Path, text: str, *, root: Path | None = None, append: bool = False) -> None:
    """Write ``text`` to ``path``: in place to a stream, else replacing the file atomically (or
    appending, if ``append``). :class:`Refused` (an OSError) where :func:`problem` says no."""
    if is_stream(path):
        _to_stream(path, text)
        return
    why = problem(path, root)
    if why:
        raise Refused(f"{path} {why}")
    if append:
        with open(path, "a", encoding="utf-8") as handle:
            handle.write(text)
        return
    replace(Path(os.path.realpath(path)), text)


def _to_stream(path: Path, text: str) -> None:
    """Write to a stream without truncating what it leads to. One of this process's own file
    descriptors is written through itself, sharing its offset with what the process writes
    there (reopened, its file's end would be overwritten by the next line of output); a device
    or FIFO is opened for appending (a FIFO without a reader is an error, not a hang)."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()  # what was written so far comes first
    own = _own_descriptor(path)
    if own is not None:  # on a line of its own: a terminal's last line may be unfinished
        _write_all(own, "\n" + text if own in (1, 2) else text)
        return
    fifo = stat.S_ISFIFO(os.stat(path).st_mode)
    flags = os.O_WRONLY | os.O_APPEND | getattr(os, "O_NOCTTY", 0)
    try:
        fd = os.open(path, flags | (os.O_NONBLOCK if fifo else 0))
    except OSError as exc:
        if exc.errno == errno.ENXIO:
            raise Refused(f"{path} is a FIFO that nothing reads") from None
        raise
    try:
        if fifo:
            os.set_blocking(fd, True)
        _write_all(fd, text)
    finally:
        os.close(fd)


def _own_descriptor(path: Path) -> int | None:
    """The file descriptor of this process that ``path`` names (/dev/stdout is 1), or None."""
    match = _STREAMS.fullmatch(os.path.abspath(path))
    if match is None:
        return None
    name, pid = match.group(1), match.group(2)
    if pid not in (None, "self", str(os.getpid())):
        return None  # another process's descriptor: opened like any stream
    if name in ("stdout", "stderr"):
        return 1 if name == "stdout" else 2
    return int(os.path.basename(path))


def _write_all(fd: int, text: str) -> None:
    data = text.encode("utf-8")
    while data:
        data = data[os.write(fd, data) :]


def replace(path: Path, text: str) -> None:
    """Replace the regular file ``path`` (or make it) with ``text`` in one step, keeping its
    mode; the directories it needs are made."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        mode = stat.S_IMODE(path.stat().st_mode)
    except FileNotFoundError:
        mode = 0o666 & ~_umask()  # mkstemp makes 0600; an output is an ordinary file
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.chmod(tmp, mode)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


# A temporary file of add_new older than this was left by a killed writer; a younger one may be
# a writer's at work right now.
STALE_SECONDS = 24 * 3600


def add_new(directory: Path, stem: str, text: str) -> Path:
    """Add ``text`` to ``directory`` as a new file ``STEM-RANDOM.json`` and return its path.

    Safe under writers at once and a writer killed at any point: the text is written to a
    temporary file in ``directory`` (a dot file, which readers of the store skip), synced, then
    hard-linked to its name, which fails rather than replace a file of that name; the random
    part makes such a clash all but impossible, and a clash is retried under another. Where
    the file system has no hard links, the temporary file is renamed, once no file has the
    name. Temporary files older than a day, left by killed writers, are removed on the way."""
    directory.mkdir(parents=True, exist_ok=True)
    _remove_stale(directory)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".new-", suffix=".tmp")
    try:
        os.chmod(tmp, 0o666 & ~_umask())
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        while True:
            path = directory / f"{stem}-{uuid.uuid4().hex[:8]}.json"
            try:
                os.link(tmp, path)
            except FileExistsError:
                continue
            except OSError as exc:
                if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EXDEV):
                    raise
                if path.exists():
                    continue
                os.rename(tmp, path)  # no hard links here (some network and FAT file systems)
            return path
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp)


def _remove_stale(directory: Path) -> None:
    """Remove the temporary files of :func:`add_new` that killed writers left."""
    cutoff = time.time() - STALE_SECONDS
    for stale in directory.glob(".new-*.tmp"):
        with contextlib.suppress(OSError):
            if stale.stat().st_mtime < cutoff:
                stale.unlink()


def now() -> str:
    """This moment in UTC, as the reports and the baselines stamp it."""
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
