"""A process that imports torch once and forks the processes of the pairs (Note [Fork server]).

:class:`Server` starts it (``python -c`` with :mod:`.forkserver_main`'s text) and asks it for
processes; :class:`Forked` is such a process as the controller sees it, with the part of
``subprocess.Popen``'s interface that :mod:`.reruns` uses.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import selectors
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Collection, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

READY_TIMEOUT = 300.0  # seconds the server may take to import torch (a cold disk)
MESSAGE = 1 << 16  # bytes an answer of the server may take
# The modules the server imports, where the controller's collection imported their package:
# the ones whose import a process of the pairs pays most for (Note [Fork server]). torch's own
# torch._dynamo, which an optimizer's constructor imports, cost 1.6 s of every process; pytest,
# which every process imports, 0.14 s after torch.
PRELOADED = ("pytest", "torch", "torch._dynamo", "torchvision")
# The packages whose import starts a server (pytest comes with torch's: every process has it).
PACKAGES = ("torch", "torchvision")


def importing(package: str) -> list[str]:
    """The modules a server imports once this process starts importing ``package`` (one of
    :data:`PACKAGES`): its own, torch's, which each of them imports first, and pytest."""
    return [name for name in PRELOADED if _top(name) in ("pytest", "torch", package)]


def preloaded() -> list[str]:
    """The modules a server would import: none where this process has not imported torch,
    else those of :data:`PRELOADED` whose package it imported (torch for ``torch._dynamo``)
    and that this torch has."""
    if "torch" not in sys.modules:
        return []
    return [
        name
        for name in PRELOADED
        if _top(name) in sys.modules and importlib.util.find_spec(name) is not None
    ]


def libraries(leave: Collection[str] = ()) -> list[str]:
    """The modules this process imported from the interpreter's own directories (the standard
    library, site-packages), in the order it imported them, but for the packages named in
    ``leave``: what a server imports besides torch (Note [Fork server]). A side's code lies
    in its tree, which is none of these."""
    where = _library_directories()
    found = []
    for name, module in list(sys.modules.items()):
        file = getattr(module, "__file__", None)
        if name in ("__main__", "__mp_main__") or _top(name) in leave or not isinstance(file, str):
            continue
        if os.path.abspath(file).startswith(where):  # no link resolved: thousands of files
            found.append(name)
    return found


def _library_directories() -> tuple[str, ...]:
    """The interpreter's library directories, as named and with their links resolved."""
    import site
    import sysconfig

    paths = sysconfig.get_paths()
    named = {paths[key] for key in ("stdlib", "platstdlib", "purelib", "platlib") if key in paths}
    named.update(site.getsitepackages())
    found = {os.path.abspath(directory) for directory in named}
    found |= {os.path.realpath(directory) for directory in named}
    return tuple(os.path.join(directory, "") for directory in found)


def _top(name: str) -> str:
    return name.partition(".")[0]


class Server:
    """The fork server: started at once, ready once it has imported its modules."""

    def __init__(self, modules: Sequence[str], entries: Sequence[Path], env: dict[str, str]):
        """Import ``modules`` in a server started with ``env``; it declines to fork where a
        module it then loaded is also found in ``entries``, the paths a side's processes put
        first (:meth:`ready`)."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self._socket = ours
        self._lock = threading.Lock()
        self._ready: bool | None = None  # not yet known
        self._loads = 0  # answers to :meth:`load` not yet read
        self._ended = False
        self.modules = list(modules)
        self.why = ""  # why it is not used, once known
        self.address = ""  # the abstract socket its Clients connect to, once ready
        self.declined = ""  # why it did not keep the libraries it was given, if it did not
        self._listed: Any = None  # the file naming them, kept until it ends
        self._errors = tempfile.TemporaryFile()  # noqa: SIM115 - open as long as the server
        code = Path(__file__).with_name("forkserver_main.py").read_text(encoding="utf-8")
        first = [os.path.abspath(entry) for entry in entries]
        self.python = sys.executable
        with theirs:
            self._process = subprocess.Popen(
                [
                    *(self.python, "-c", code, str(theirs.fileno()), str(os.getpid())),
                    *(json.dumps(list(modules)), json.dumps(first)),
                ],
                pass_fds=(theirs.fileno(),),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=self._errors,
                env=env,
            )
        self.pid = self._process.pid

    def ready(self) -> bool:
        """Whether it imported its modules and forks processes (waits for it the first time,
        and for what :meth:`load` asked); :attr:`why` says why not."""
        with self._lock:
            if self._ready is None:
                self._ready = self._answer()
            while self._ready and self._loads:
                self._loads -= 1
                self._ready = self._answer()
            if not self._ready:
                self._end()
            return self._ready

    def where(self) -> dict[str, Any]:
        """How a process it forked reaches it for ranks (:class:`Client`)."""
        return {"address": self.address, "pid": self.pid, "python": self.python}

    def load(self, modules: Sequence[str]) -> None:
        """Have it import ``modules`` too, those it has not, before it forks anything; asked
        without waiting: :meth:`ready` reads its answer."""
        more = [name for name in modules if name not in self.modules]
        with self._lock:
            if not more or self._ready is False:
                return
            try:
                self._socket.send(json.dumps({"load": more}).encode())
            except OSError:  # it ended: ready() says why
                return
            self._loads += 1
            self.modules += more

    def libraries(self, modules: Sequence[str]) -> None:
        """Have it import ``modules`` too, the libraries this process's collection imported,
        before it forks anything; those it cannot keep it leaves to the processes, and
        :attr:`declined` says why. Asked without waiting: :meth:`ready` reads its answer."""
        with self._lock:
            if not modules or self._ready is False or self._listed is not None:
                return
            self._listed = tempfile.NamedTemporaryFile(  # noqa: SIM115 - read by the server
                "w", prefix="hpml-libraries-", suffix=".json", encoding="utf-8"
            )
            json.dump(list(modules), self._listed)
            self._listed.flush()
            try:
                self._socket.send(json.dumps({"libraries": self._listed.name}).encode())
            except OSError:  # it ended: ready() says why
                return
            self._loads += 1

    def _answer(self) -> bool:
        self._socket.settimeout(READY_TIMEOUT)
        try:
            answer = json.loads(self._socket.recv(MESSAGE) or b"null")
        except (OSError, ValueError):
            answer = None
        finally:
            self._socket.settimeout(None)
        if isinstance(answer, dict) and answer.get("ready"):
            # the process that forks now (one forked from it, with the libraries): the parent
            # each of its processes checks for and dies with
            self.pid = answer.get("pid", self.pid)
            # where the processes of the pairs ask it for ranks ("": nowhere)
            self.address = answer.get("address", self.address)
            self.declined = answer.get("libraries", self.declined)
            return True
        if isinstance(answer, dict):
            shadowed = ", ".join(answer.get("shadowed") or ["modules"])
            self.why = f"the tree has modules it imported: {shadowed}"
        else:
            self.why = f"it ended ({self._last_error()})"
        return False

    def _last_error(self) -> str:
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._process.wait(1.0)
        self._errors.seek(0)
        lines = self._errors.read().decode(errors="replace").strip().splitlines()
        return f"exit {self._process.returncode}: {lines[-1] if lines else 'no output'}"

    def popen(
        self,
        command: Sequence[str],
        *,
        cwd: str | os.PathLike[str],
        env: dict[str, str],
        pass_fds: Sequence[int] = (),
        output: tuple[int, int] | None = None,
        session: bool = False,
    ) -> Forked:
        """``command``, ``[python, "-m", module, *args]`` of the server's interpreter, as a
        process forked by the server; its output captured, as ``subprocess.Popen`` with
        ``stdout=PIPE, stderr=PIPE`` would, or written to ``output`` (two descriptors);
        ``session``: in a session of its own (``start_new_session``)."""
        if list(command[:1]) != [self.python] or not self.ready():
            raise OSError(f"the fork server cannot run {command[:3]}: {self.why}")
        return _fork(self._socket, self._lock, command, cwd, env, pass_fds, output, session)

    def close(self) -> None:
        """End the server (its processes end with it); safe to call twice."""
        with contextlib.suppress(OSError):
            self._socket.shutdown(socket.SHUT_RDWR)
        with self._lock:
            self._end()

    def _end(self) -> None:
        if self._ended:
            return
        self._ended = True
        self._socket.close()
        if self._listed is not None:
            self._listed.close()
        try:
            self._process.wait(5.0)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        self._errors.close()


class Client:
    """The fork server as a process of the pairs asks it for processes (a distributed test's
    ranks), on a connection of its own: what it asked for is killed once the connection
    closes, as this process ends (Note [Fork server])."""

    def __init__(self, address: str, pid: int, python: str) -> None:
        self.address, self.pid, self.python = address, pid, python
        self._socket: socket.socket | None = None
        self._lock = threading.Lock()

    def popen(
        self,
        command: Sequence[str],
        *,
        cwd: str | os.PathLike[str],
        env: dict[str, str],
        output: tuple[int, int] | None = None,
        session: bool = False,
    ) -> Forked:
        """As :meth:`Server.popen`; ``OSError`` where the server cannot be reached."""
        if list(command[:1]) != [self.python]:
            raise OSError(f"the fork server cannot run {command[:1]}")
        with self._lock:
            if self._socket is None:
                connection = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
                try:
                    connection.connect("\0" + self.address)
                except OSError:
                    connection.close()
                    raise
                self._socket = connection
        return _fork(self._socket, self._lock, command, cwd, env, (), output, session)


def _fork(
    sock: socket.socket,
    lock: threading.Lock,
    command: Sequence[str],
    cwd: str | os.PathLike[str],
    env: dict[str, str],
    pass_fds: Sequence[int],
    output: tuple[int, int] | None,
    session: bool,
) -> Forked:
    """Ask the server on ``sock`` to fork ``command`` (``[python, "-m", module, *args]``)."""
    _, dash_m, module, *args = command
    if dash_m != "-m":
        raise OSError(f"the fork server runs modules only, not {command[:3]}")
    pipes = [os.pipe(), os.pipe()] if output is None else []
    out_w, err_w = output or (pipes[0][1], pipes[1][1])
    status_r, status_w = os.pipe()
    request = {
        "module": module,
        "args": args,
        "cwd": str(cwd),
        "env": env,
        "fds": list(pass_fds),
        "session": session,
    }
    try:
        with lock:
            socket.send_fds(
                sock, [json.dumps(request).encode()], [out_w, err_w, *pass_fds, status_w]
            )
            answer = sock.recv(MESSAGE)
        pid = json.loads(answer)["pid"]
    except (OSError, ValueError, KeyError, TypeError) as error:
        for end in [status_r, *(read for read, _ in pipes)]:
            os.close(end)
        raise OSError(f"the fork server did not start a process ({error})") from error
    finally:
        for end in [status_w, *(write for _, write in pipes)]:
            os.close(end)
    out_r, err_r = (pipes[0][0], pipes[1][0]) if pipes else (-1, -1)
    return Forked(list(command), pid, out_r, err_r, status_r)


class Forked:
    """A process the server forked, as ``subprocess.Popen`` shows one (text output; with its
    output written elsewhere, its descriptors are -1 and nothing is read)."""

    def __init__(self, args: list[str], pid: int, out: int, err: int, status: int):
        self.args = args
        self.pid = pid
        self.returncode: int | None = None
        self._out, self._err, self._status = out, err, status
        # Two threads wait for it (the one reading its output, and one stopping it on Ctrl-C):
        # one reads the status pipe at a time, and none after it is closed (EBADF, or another
        # pipe that reused its number).
        self._waiting = threading.Lock()

    def __enter__(self) -> Forked:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        for end in (self._out, self._err):
            _close(end)
        if kind is None:
            self.wait()
        self._close_status()

    def release(self) -> None:
        """Close what this process holds of it (its pipes), once it has ended or no one waits."""
        for end in (self._out, self._err):
            _close(end)
        self._close_status()

    def _close_status(self) -> None:
        with self._waiting:
            _close(self._status)
            self._status = -1  # a later wait asks the system, not a closed pipe (EBADF)

    def communicate(self) -> tuple[str, str]:
        """Its output, read to the end of both pipes, once it has ended."""
        read: dict[int, bytearray] = {self._out: bytearray(), self._err: bytearray()}
        with selectors.DefaultSelector() as selector:
            for end in read:
                selector.register(end, selectors.EVENT_READ)
            while selector.get_map():
                for key, _ in selector.select():
                    chunk = os.read(key.fd, 1 << 16)
                    if chunk:
                        read[key.fd] += chunk
                    else:
                        selector.unregister(key.fd)
        self.wait()
        return read[self._out].decode(errors="replace"), read[self._err].decode(errors="replace")

    def poll(self) -> int | None:
        """Its exit status, if it has ended."""
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.wait(0.0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        """Its exit status, once the server has seen it end (``subprocess.TimeoutExpired``
        after ``timeout`` seconds)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.returncode is None:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            with self._waiting:  # held a slice at most: another waiter's timeout holds
                if self.returncode is None and self._status >= 0:
                    self._look(WAIT_SLICE if left is None else min(left, WAIT_SLICE))
                unheard = self.returncode is None and self._status < 0
            if unheard:
                return self._wait_unheard(left)
            if self.returncode is None and left is not None and left <= 0:
                raise subprocess.TimeoutExpired(self.args, timeout or 0.0)
        return self.returncode

    def _look(self, seconds: float) -> None:
        """Read its exit status, if the server wrote it within ``seconds``."""
        import select  # here: only a process of the pairs is waited for this way

        readable, _, _ = select.select([self._status], [], [], seconds)
        if readable:
            said = os.read(self._status, 32)
            # the server ended without saying (killed): so has the process, with it
            self.returncode = int(said) if said else -signal.SIGKILL

    def _wait_unheard(self, timeout: float | None) -> int:
        """Wait for it without its status pipe (closed once a Ctrl-C cut the wait short): until
        the system no longer knows its pid. Its status went with the pipe."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            try:
                os.kill(self.pid, 0)
            except ProcessLookupError:
                self.returncode = -signal.SIGKILL
                return self.returncode
            if deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(self.args, timeout or 0.0)
            time.sleep(0.01)

    def send_signal(self, number: int) -> None:
        if self.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, number)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


WAIT_SLICE = 0.05  # seconds a waiter holds the status pipe before another may look


def _close(end: int) -> None:
    with contextlib.suppress(OSError):  # closed already
        os.close(end)
