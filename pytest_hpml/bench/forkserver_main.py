"""The fork server's own code (Note [Fork server]), run by :class:`.forkserver.Server` as
``python -c`` with this file's text: the standard library only, so that it imports nothing of
either side's code, nor this plugin, which a side may bring in a version of its own.

It imports the modules it is given (torch), says whether it could, and then answers each
request. One that names more modules (torchvision, once the controller's collection imported
it) it answers as it answered the first, once it has imported them. One that names the
collection's libraries it hands to a process forked from it, which imports them and serves in
its place, or ends where it cannot keep them (then this one serves on). For any other it forks a
process, which becomes ``python -m pytest ARGS`` as a fresh interpreter started in the
request's directory and environment would be, with its output and the descriptors it is given
at the numbers the request names. Each process's exit status is written to the status pipe
that came with its request.

The processes of the pairs ask it for processes too (a distributed test's ranks), each on a
connection of its own to an abstract socket (Linux) whose name the first answer gives: what
a connection asked for is killed, with its process group, once the connection closes, as the
process that asked ends however it ends.
"""

from __future__ import annotations

import contextlib
import fcntl
import gc
import importlib
import importlib.machinery
import json
import os
import select
import signal
import socket
import struct
import sys
from collections.abc import Callable
from types import FrameType
from typing import Any, Optional, Union

MESSAGE = 1 << 20  # bytes a request may take
PR_SET_PDEATHSIG = 1  # prctl(2): the signal a process gets when its parent ends

Request = dict[str, Any]  # a request as it came off the socket (JSON)
# (Union and Optional: these are evaluated at import, and | on types needs Python 3.10)
Ends = tuple[Union[socket.socket, int, None], ...]  # the descriptors a forked process closes
Handler = Union[Callable[[int, Optional[FrameType]], Any], int, signal.Handlers, None]
Started = tuple[list[str], Handler]  # the interpreter's own path, and its SIGINT handler


def main() -> None:
    sock = socket.socket(fileno=int(sys.argv[1]))
    _die_with(int(sys.argv[2]))
    # Ctrl-C in a terminal reaches the processes, which end as pytest does; this one ends when
    # the controller closes the socket or ends. They get back what this one started with.
    interrupt = signal.signal(signal.SIGINT, signal.SIG_IGN)
    modules, entries = json.loads(sys.argv[3]), json.loads(sys.argv[4])
    shadowed = _load(modules, entries)
    listener = _listener()
    address = listener.getsockname()[1:].decode() if listener else ""
    answer = {"ready": not shadowed, "shadowed": shadowed, "address": address}
    sock.send(json.dumps(answer).encode())
    if shadowed:
        return
    prefix = _started_path()
    gc.freeze()  # the imported objects stay shared: no collection touches their pages
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # wakes select() through wake_r
    children: dict[int, int] = {}  # pid -> its status pipe
    clients: dict[socket.socket, set[int]] = {}  # a connection -> the pids it asked for
    mine = (wake_r, wake_w, sock, listener)  # what a forked process closes, with the clients
    while True:
        waited: list[socket.socket | int] = [
            sock,
            wake_r,
            *clients,
            *([listener] if listener else []),
        ]
        readable, _, _ = select.select(waited, [], [])
        if wake_r in readable:
            os.read(wake_r, 512)
        _reap(children, clients)
        if listener is not None and listener in readable:
            _accept(listener, clients)
        for client in [c for c in clients if c in readable]:
            _serve(client, children, clients, mine, (prefix, interrupt))
        if sock in readable:
            message, fds, _, _ = socket.recv_fds(sock, MESSAGE, 64)
            if not message:  # the controller closed its end: the run is over
                _end(children)
            request = json.loads(message)
            if "load" in request:  # more modules, asked before the first fork
                shadowed = _load(request["load"], entries)
                sock.send(json.dumps({"ready": not shadowed, "shadowed": shadowed}).encode())
                if shadowed:
                    return
                gc.freeze()
                continue
            if "libraries" in request:  # the collection's libraries, asked before the first fork
                if _libraries(request["libraries"], entries, sock):
                    gc.freeze()  # this is the process that serves now
                continue
            pid = _fork(request, fds, children, (*mine, *clients))
            if pid == 0:
                _become(request, fds, (prefix, interrupt))  # never returns
            sock.send(json.dumps({"pid": pid}).encode())


def _fork(request: Request, fds: list[int], children: dict[int, int], mine: Ends) -> int:
    """Fork the process ``request`` asks for: 0 in it, with this one's descriptors (``mine``:
    its pipes and sockets) closed; its pid here, which keeps only its status pipe."""
    pid = os.fork()
    if pid == 0:
        signal.set_wakeup_fd(-1)
        for end in mine:
            if isinstance(end, socket.socket):
                end.close()
            elif end is not None:
                os.close(end)
        return 0
    for fd in fds[:-1]:
        os.close(fd)
    children[pid] = fds[-1]
    return pid


def _listener() -> socket.socket | None:
    """The socket the processes of the pairs connect to: abstract, so that it leaves no file
    behind (Linux only; elsewhere none, and ranks start afresh)."""
    if not sys.platform.startswith("linux"):
        return None
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind(f"\0pytest-hpml-forkserver-{os.getpid()}-{os.urandom(8).hex()}")
    listener.listen(16)
    return listener


def _accept(listener: socket.socket, clients: dict[socket.socket, set[int]]) -> None:
    """A process of the pairs connects; one of another user is turned away."""
    with contextlib.suppress(OSError):
        client, _ = listener.accept()
        credentials = client.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12)
        if struct.unpack("3i", credentials)[1] != os.getuid():
            client.close()
            return
        clients[client] = set()


def _serve(
    client: socket.socket,
    children: dict[int, int],
    clients: dict[socket.socket, set[int]],
    mine: Ends,
    started: Started,
) -> None:
    """One request of a connected process: a process to fork. Once the connection closes, what
    it asked for and still runs is killed with its process group."""
    try:
        message, fds, _, _ = socket.recv_fds(client, MESSAGE, 64)
    except OSError:
        message, fds = b"", []
    if not message:
        for pid in clients.pop(client):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
        client.close()
        return
    request = json.loads(message)
    pid = _fork(request, fds, children, (*mine, *clients))
    if pid == 0:
        _become(request, fds, started)  # never returns
    clients[client].add(pid)
    with contextlib.suppress(OSError):  # it ended: its processes are killed at the next look
        client.send(json.dumps({"pid": pid}).encode())


def _end(children: dict[int, int]) -> None:
    """End now, and the processes still running with this one (as a SIGKILLed controller's
    end them: their parent-death signal, which forking clears, is this one's to set)."""
    for pid in children:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            try:
                os.killpg(pid, signal.SIGKILL)  # a rank, in a session of its own
            except ProcessLookupError:
                os.kill(pid, signal.SIGKILL)
    os._exit(0)  # torch's modules are not torn down one by one: nothing here needs it


def _die_with(parent: int) -> None:
    """End with the controller, even one killed with SIGKILL (its processes end with this)."""
    if sys.platform.startswith("linux"):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:
        os._exit(1)


def _load(modules: list[str], entries: list[str]) -> list[str]:
    """Import ``modules``; then the modules loaded here that a fresh process of a side would
    find elsewhere, in ``entries``, the paths that come first there (its tree's): one forked
    from here would run this one's (none, normally)."""
    for name in modules:
        importlib.import_module(name)
    suffixes = importlib.machinery.EXTENSION_SUFFIXES
    shadowed = []
    for name in sorted({name.partition(".")[0] for name in sys.modules}):
        for entry in entries:
            found = [os.path.join(entry, name, "__init__.py"), os.path.join(entry, f"{name}.py")]
            found += [os.path.join(entry, name + suffix) for suffix in suffixes]
            shadowed += [where for where in found if os.path.isfile(where)]
    return shadowed[:3]


def _libraries(listed: str, entries: list[str], sock: socket.socket) -> bool:
    """Import the libraries named in the file ``listed`` in a process forked from this one,
    which serves in its place once it has them; True in that process. Where one of them
    starts a thread (a forked process would not have it), lies in ``entries``, or the process
    ends, this one serves on without them, and its answer says why."""
    server = os.getpid()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the one that imports them
        os.close(read)
        _die_with(server)
        why = _import_libraries(listed, entries)
        os.write(write, (why or "ready").encode())
        os.close(write)
        if why:
            os._exit(0)
        sock.send(json.dumps({"ready": True, "pid": os.getpid(), "libraries": ""}).encode())
        return True
    os.close(write)
    with os.fdopen(read, "rb") as answer:
        why = answer.read().decode(errors="replace")
    if why == "ready":  # it serves until the run ends: so does this one
        _, status = os.waitpid(pid, 0)
        os._exit(os.waitstatus_to_exitcode(status))
    _, status = os.waitpid(pid, 0)
    why = why or f"the process importing them ended with {os.waitstatus_to_exitcode(status)}"
    sock.send(json.dumps({"ready": True, "pid": server, "libraries": why}).encode())
    return False


def _import_libraries(listed: str, entries: list[str]) -> str:
    """Import the modules named in the file ``listed`` (one that fails is left to the
    processes, which import it as the collection did); why they cannot stay, or ''."""
    with open(listed, encoding="utf-8") as names:
        modules = json.load(names)
    for name in modules:
        with contextlib.suppress(Exception):
            importlib.import_module(name)
    # A thread of Python's would be missing from every process forked from here, and the
    # library that started it would not know. A native pool (OpenBLAS's, as scipy.stats
    # starts one) restarts in a forked process, as numpy's does in torch's server.
    threading = sys.modules.get("threading")
    if threading is not None and threading.active_count() > 1:
        return "importing them started a thread"
    shadowed = _load([], entries)
    return f"the tree has modules they import: {', '.join(shadowed)}" if shadowed else ""


def _started_path() -> list[str]:
    """This interpreter's path without what ``-c`` and PYTHONPATH put first: what every
    interpreter started here has after those (the standard library, site-packages, .pth)."""
    first = {"", *_pythonpath(os.environ.get("PYTHONPATH", ""))}
    return [entry for entry in sys.path if entry not in first]


def _pythonpath(value: str) -> list[str]:
    return [os.path.abspath(entry) for entry in value.split(os.pathsep) if entry]


def _reap(children: dict[int, int], clients: dict[socket.socket, set[int]]) -> None:
    """Write each ended process's exit status (as subprocess gives it) to its status pipe."""
    for pid in list(children):
        with contextlib.suppress(ChildProcessError):
            done, status = os.waitpid(pid, os.WNOHANG)
            if not done:
                continue
            for asked in clients.values():
                asked.discard(pid)
            end = children.pop(pid)
            with contextlib.suppress(OSError):  # nobody waits for it any more
                os.write(end, str(os.waitstatus_to_exitcode(status)).encode())
            os.close(end)


def _become(request: Request, fds: list[int], started: Started) -> None:
    """In the forked process: become ``python -m MODULE ARGS`` started fresh in the request's
    directory and environment (in a session of its own, where it asks for one, as torch's
    launcher starts a rank). Whatever it raises ends this interpreter as it ends that one
    (exit handlers, streams flushed, the status or the traceback), never in the server's loop."""
    prefix, interrupt = started
    if request.get("session"):
        os.setsid()
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    signal.signal(signal.SIGINT, interrupt)
    out, err, *passed, status = fds
    os.close(status)
    os.dup2(out, 1)
    os.dup2(err, 2)
    os.close(out)
    os.close(err)
    _place(passed, request["fds"])
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    first = [] if os.environ.get("PYTHONSAFEPATH") else [os.getcwd()]
    sys.path[:] = [*first, *_pythonpath(os.environ.get("PYTHONPATH", "")), *prefix]
    sys.argv[:] = [request["module"], *request["args"]]
    import runpy

    runpy.run_module(request["module"], run_name="__main__", alter_sys=True)
    raise SystemExit(0)


def _place(passed: list[int], numbers: list[int]) -> None:
    """Move the descriptors received to the numbers the request names (a fresh process got
    them there by ``pass_fds``), out of the way of those numbers first."""
    above = max([2, *numbers]) + 1
    moved = [fcntl.fcntl(fd, fcntl.F_DUPFD, above) for fd in passed]
    for fd in passed:
        os.close(fd)
    for fd, number in zip(moved, numbers):
        os.dup2(fd, number)
        os.close(fd)


if __name__ == "__main__":
    main()
