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
import sys

MESSAGE = 1 << 20  # bytes a request may take
PR_SET_PDEATHSIG = 1  # prctl(2): the signal a process gets when its parent ends


def main() -> None:
    sock = socket.socket(fileno=int(sys.argv[1]))
    _die_with(int(sys.argv[2]))
    # Ctrl-C in a terminal reaches the processes, which end as pytest does; this one ends when
    # the controller closes the socket or ends. They get back what this one started with.
    interrupt = signal.signal(signal.SIGINT, signal.SIG_IGN)
    modules, entries = json.loads(sys.argv[3]), json.loads(sys.argv[4])
    shadowed = _load(modules, entries)
    sock.send(json.dumps({"ready": not shadowed, "shadowed": shadowed}).encode())
    if shadowed:
        return
    prefix = _started_path()
    gc.freeze()  # the imported objects stay shared: no collection touches their pages
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # wakes select() through wake_r
    children: dict[int, int] = {}  # pid -> its status pipe
    while True:
        readable, _, _ = select.select([sock, wake_r], [], [])
        if wake_r in readable:
            os.read(wake_r, 512)
        _reap(children)
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
            pid = os.fork()
            if pid == 0:
                for end in (wake_r, wake_w):
                    os.close(end)
                _become(request, fds, sock, (prefix, interrupt))  # never returns
            for fd in fds[:-1]:
                os.close(fd)
            children[pid] = fds[-1]
            sock.send(json.dumps({"pid": pid}).encode())


def _end(children: dict[int, int]) -> None:
    """End now, and the processes still running with this one (as a SIGKILLed controller's
    end them: their parent-death signal, which forking clears, is this one's to set)."""
    for pid in children:
        with contextlib.suppress(ProcessLookupError):
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


def _reap(children: dict[int, int]) -> None:
    """Write each ended process's exit status (as subprocess gives it) to its status pipe."""
    for pid in list(children):
        with contextlib.suppress(ChildProcessError):
            done, status = os.waitpid(pid, os.WNOHANG)
            if not done:
                continue
            end = children.pop(pid)
            with contextlib.suppress(OSError):  # nobody waits for it any more
                os.write(end, str(os.waitstatus_to_exitcode(status)).encode())
            os.close(end)


def _become(request: dict, fds: list[int], sock: socket.socket, started: tuple) -> None:
    """In the forked process: become ``python -m MODULE ARGS`` started fresh in the request's
    directory and environment. Whatever it raises ends this interpreter as it ends that one
    (exit handlers, streams flushed, the status or the traceback), never in the server's loop."""
    prefix, interrupt = started
    sock.close()
    signal.set_wakeup_fd(-1)
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
