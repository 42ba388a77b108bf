"""The fork server (Note [Fork server]): a real server process forking real processes, each
compared with a fresh interpreter started the same way; then head against base through it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_hpml.bench import reruns
from pytest_hpml.bench.forkserver import Server
from tests.conftest import BENCH_TIME, committed
from tests.test_processes import still_running

if TYPE_CHECKING:
    from tests.conftest import Project

# A module run as ``python -m shown ARGS``: what an interpreter started that way sees.
SHOWN = """
import json, os, sys

fd = int(sys.argv[2]) if len(sys.argv) > 2 else None
if fd is not None:
    os.write(fd, b"through the descriptor passed")
print(json.dumps({
    "cwd": os.getcwd(),
    "path": sys.path[:3],
    "argv": sys.argv,
    "seen": os.environ.get("SEEN"),
    "main": __name__,
    "spec": __spec__.name,
}))
sys.stderr.write("to stderr\\n")
raise SystemExit(int(sys.argv[1]))
"""


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    # Its processes get the SIGINT action it started with: the default, even in a run started
    # with SIGINT ignored (a shell's background job), which a handler here is not passed on as.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        started = Server(["json"], [], dict(os.environ))
    finally:
        signal.signal(signal.SIGINT, previous)
    yield started
    started.close()


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    (tmp_path / "tree").mkdir()
    (tmp_path / "tree" / "shown.py").write_text(SHOWN)
    (tmp_path / "run").mkdir()
    return tmp_path


def test_a_forked_process_runs_a_module_as_a_fresh_interpreter_would(
    server: Server, tree: Path
) -> None:
    """Its directory, path (the directory, then PYTHONPATH), arguments, environment, output and
    exit status are those of ``python -m`` started fresh."""
    env = {**os.environ, "PYTHONPATH": str(tree / "tree"), "SEEN": "yes"}
    command = [sys.executable, "-m", "shown", "3"]
    fresh = subprocess.run(command, cwd=tree / "run", env=env, capture_output=True, text=True)
    with server.popen(command, cwd=tree / "run", env=env) as child:
        out, err = child.communicate()
    assert child.pid != server.pid
    assert (child.returncode, out, err) == (fresh.returncode, fresh.stdout, fresh.stderr)
    shown = json.loads(out)
    assert shown["path"][:2] == [str(tree / "run"), str(tree / "tree")]
    assert (shown["seen"], shown["main"], shown["spec"], child.returncode) == (
        "yes",
        "__main__",
        "shown",
        3,
    )


def test_a_descriptor_passed_comes_at_the_number_it_had_here(server: Server, tree: Path) -> None:
    """As ``pass_fds`` gives it to a fresh process (the turns of a pair travel so)."""
    read, write = os.pipe()
    try:
        env = {**os.environ, "PYTHONPATH": str(tree / "tree")}
        command = [sys.executable, "-m", "shown", "0", str(write)]
        with server.popen(command, cwd=tree / "run", env=env, pass_fds=(write,)) as child:
            child.communicate()
        os.close(write)
        assert child.returncode == 0
        assert os.read(read, 100) == b"through the descriptor passed"
    finally:
        os.close(read)


def test_ctrl_c_and_kill_reach_a_forked_process(server: Server, tree: Path) -> None:
    """SIGINT ends it as it ends a fresh one (KeyboardInterrupt); waiting has a timeout."""
    (tree / "tree" / "waits.py").write_text(
        "import time\nprint('up', flush=True)\ntime.sleep(60)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(tree / "tree")}
    with server.popen([sys.executable, "-m", "waits"], cwd=tree, env=env) as child:
        with pytest.raises(subprocess.TimeoutExpired):
            child.wait(0.2)
        assert _line(child._out) == b"up\n"
        child.send_signal(signal.SIGINT)
        _, err = child.communicate()
    assert "KeyboardInterrupt" in err
    assert child.returncode == -signal.SIGINT  # as Python ends on an uncaught Ctrl-C
    with server.popen([sys.executable, "-m", "waits"], cwd=tree, env=env) as child:
        child.kill()
        child.communicate()
    assert child.returncode == -signal.SIGKILL


def test_a_process_left_by_a_ctrl_c_is_still_stopped_and_waited_for(
    server: Server, tree: Path
) -> None:
    """Ctrl-C in the block closed its status pipe: killing and waiting for it afterwards raised
    OSError (a bad file descriptor) in place of pytest's clean exit on Ctrl-C."""
    (tree / "tree" / "waits.py").write_text("import time\ntime.sleep(60)\n")
    env = {**os.environ, "PYTHONPATH": str(tree / "tree")}
    waits = [sys.executable, "-m", "waits"]
    with pytest.raises(KeyboardInterrupt), server.popen(waits, cwd=tree, env=env) as child:
        raise KeyboardInterrupt
    assert child.poll() is None  # still running: nothing waited for it
    child.kill()
    assert child.wait(10) == -signal.SIGKILL
    child.release()  # twice closed: nothing to say


def test_a_process_that_starts_after_its_pair_was_stopped_is_stopped_at_once(
    server: Server, tree: Path
) -> None:
    """Ctrl-C while a pair's process still waited for the server (importing torch): the
    process the server then forks is stopped as it starts, and nothing is left waiting."""
    (tree / "tree" / "waits.py").write_text(
        "import time\nprint('up', flush=True)\ntime.sleep(60)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(tree / "tree")}
    turn = reruns.Turn()
    turn.stop()
    with server.popen([sys.executable, "-m", "waits"], cwd=tree, env=env) as child:
        turn.started(child)
        _, err = child.communicate()
    assert child.returncode in (-signal.SIGINT, -signal.SIGKILL), err
    turn.close()


def test_a_tree_with_a_module_of_the_servers_own_is_refused(tree: Path) -> None:
    """A module the server imported that a process of a side would find in its tree first: the
    server forks nothing and says which file; the pairs then start fresh processes."""
    (tree / "tree" / "json").mkdir()
    (tree / "tree" / "json" / "__init__.py").write_text("")
    server = Server(["json"], [tree / "tree"], dict(os.environ))
    try:
        assert not server.ready()
        assert server.why == f"the tree has modules it imported: {tree / 'tree/json/__init__.py'}"
        with pytest.raises(OSError, match="the fork server cannot run"):
            server.popen([sys.executable, "-m", "json"], cwd=tree, env=dict(os.environ))
    finally:
        server.close()


def test_modules_asked_later_come_with_every_fork(server: Server, tree: Path) -> None:
    """What :meth:`Server.load` asks (torchvision, once the collection imported it) is imported
    before the first fork: a forked process starts with it, where a fresh one starts without."""
    (tree / "tree" / "starts.py").write_text("import sys\nprint('csv' in sys.modules)\n")
    env = {**os.environ, "PYTHONPATH": str(tree / "tree")}
    command = [sys.executable, "-m", "starts"]
    fresh = subprocess.run(command, cwd=tree, env=env, capture_output=True, text=True)
    server.load(["json", "csv"])  # json it has: only csv is asked
    assert server.modules == ["json", "csv"]
    with server.popen(command, cwd=tree, env=env) as child:
        out, err = child.communicate()
    assert (fresh.stdout, out, child.returncode) == ("False\n", "True\n", 0), err


def test_a_module_asked_later_that_the_tree_has_is_refused(tree: Path) -> None:
    """The check of the first modules holds for those asked later: the server forks nothing."""
    (tree / "tree" / "csv.py").write_text("")
    server = Server(["json"], [tree / "tree"], dict(os.environ))
    try:
        server.load(["csv"])
        assert not server.ready()
        assert server.why == f"the tree has modules it imported: {tree / 'tree/csv.py'}"
    finally:
        server.close()


def test_libraries_come_with_every_fork_from_the_process_that_imported_them(
    server: Server, tree: Path
) -> None:
    """The collection's libraries are imported in a process forked from the server, which then
    forks in its place and ends with it; one that fails to import is left to the processes."""
    (tree / "tree" / "starts.py").write_text("import sys\nprint('csv' in sys.modules)\n")
    env = {**os.environ, "PYTHONPATH": str(tree / "tree")}
    first = server.pid
    server.libraries(["csv", "no_such_library"])
    with server.popen([sys.executable, "-m", "starts"], cwd=tree, env=env) as child:
        out, err = child.communicate()
    assert (out, child.returncode, server.declined) == ("True\n", 0, ""), err
    assert server.pid != first
    server.close()
    assert still_running([first, server.pid]) == []


# A library that starts a thread as it is imported, one that waits for ever.
THREAD = (
    "import threading\n\nthreading.Thread(target=threading.Event().wait, daemon=True).start()\n"
)


@pytest.mark.parametrize(
    ("library", "declined"),
    [
        (THREAD, "thread"),
        ("import os\nos._exit(3)\n", "ended with 3"),
    ],
    ids=["starts-a-thread", "ends-the-process"],
)
def test_libraries_the_server_cannot_keep_are_left_to_each_process(
    tree: Path, library: str, declined: str
) -> None:
    """A library whose import starts a thread (a forked process would lack it) or ends the
    process: the server forks on without it, from itself, and says why."""
    (tree / "lib").mkdir()
    (tree / "lib" / "lib_that_acts.py").write_text(library)
    (tree / "tree" / "starts.py").write_text("import sys\nprint('lib_that_acts' in sys.modules)\n")
    env = {**os.environ, "PYTHONPATH": str(tree / "lib")}
    server = Server(["json"], [tree / "tree"], env)
    try:
        first = server.pid
        server.libraries(["lib_that_acts"])
        env["PYTHONPATH"] = str(tree / "tree")
        with server.popen([sys.executable, "-m", "starts"], cwd=tree, env=env) as child:
            out, err = child.communicate()
        assert (out, child.returncode, server.pid) == ("False\n", 0, first), err
        assert declined in server.declined
    finally:
        server.close()


def test_a_library_that_the_tree_has_is_left_to_each_process(tree: Path) -> None:
    """The check of the server's modules holds for the libraries: a side's tree with one of
    them keeps its own, and the server forks on without any."""
    (tree / "tree" / "csv.py").write_text("")
    server = Server(["json"], [tree / "tree"], dict(os.environ))
    try:
        server.libraries(["csv"])
        assert server.ready()
        assert server.declined == f"the tree has modules they import: {tree / 'tree/csv.py'}"
    finally:
        server.close()


def test_the_libraries_are_those_of_the_interpreters_directories(tmp_path: Path) -> None:
    """Imported from the standard library or site-packages, in the order imported; never a
    module of the tree or one of the packages to leave."""
    code = (
        "import json, sys\n"
        "sys.path.insert(0, sys.argv[1])\n"
        "import mine, imaplib, pytest\n"
        "from pytest_hpml.bench import forkserver\n"
        "print(json.dumps(forkserver.libraries({'pytest', '_pytest', 'pytest_hpml'})))\n"
    )
    (tmp_path / "mine.py").write_text("")
    done = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    assert found.index("json") < found.index("imaplib")
    assert not {"mine", "pytest", "__main__"} & set(found)
    assert not [name for name in found if name.startswith(("_pytest.", "pytest_hpml"))]


def test_a_server_imports_pytest_with_torch_and_nothing_without_it() -> None:
    """What a server imports follows what this process imported: nothing before torch (a
    project whose tests never import it starts fresh processes), then pytest, which every
    process imports, with torch and torch._dynamo, and torchvision once it is imported."""
    code = (
        "import json\n"
        "import pytest\n"
        "from pytest_hpml.bench import forkserver\n"
        "found = [forkserver.preloaded()]\n"
        "import torch\n"
        "found.append(forkserver.preloaded())\n"
        "import torchvision\n"
        "found.append(forkserver.preloaded())\n"
        "found.append(forkserver.importing('torchvision'))\n"
        "print(json.dumps(found))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    torch = ["pytest", "torch", "torch._dynamo"]
    assert json.loads(done.stdout) == [[], torch, [*torch, "torchvision"], [*torch, "torchvision"]]


def test_the_servers_processes_end_with_it(server: Server, tree: Path) -> None:
    (tree / "tree" / "waits.py").write_text(
        "import time\nprint('up', flush=True)\ntime.sleep(60)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(tree / "tree")}
    child = server.popen([sys.executable, "-m", "waits"], cwd=tree, env=env)
    with child:
        assert _line(child._out) == b"up\n"
        server.close()
        child.communicate()
    assert child.returncode == -signal.SIGKILL
    assert still_running([child.pid, server.pid]) == []


def _line(fd: int) -> bytes:
    """The first line written to ``fd``, however the pipe cuts it."""
    read = b""
    while not read.endswith(b"\n"):
        read += os.read(fd, 1) or b"\n"
    return read


# Collecting, the controller notes its fork servers: the children that run ``python -c``.
SERVERS = """def servers():  # this process's children that run python -c: the fork server
    found = []
    for stat in os.listdir("/proc"):
        try:
            with open(f"/proc/{stat}/stat") as status:
                parent = int(status.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{stat}/cmdline") as command:
                started = command.read().split("\\0")[1:2]
        except (OSError, ValueError):
            continue
        if parent == os.getpid() and started == ["-c"]:
            found.append(int(stat))
    return found


if not os.environ.get("HPML_INTERNAL_RERUN"):  # the controller, collecting
    with open(os.environ["SEEN"], "a") as out:
        out.write(json.dumps(["collecting", servers()]) + "\\n")
"""
# Head against base with tests that import torch: each process records whether torch and
# torch._dynamo were imported before its test module imported them, its parent, and where it
# found the code.
SEEN = (
    """
import json
import os
import sys

PRELOADED = ["torch" in sys.modules, "torch._dynamo" in sys.modules, "imaplib" in sys.modules]
import imaplib  # a library none of torch, pytest or the plugins imports
import torch

from work import work

{servers}


def test_timed(benchmark):
    if os.environ.get("HPML_INTERNAL_RERUN"):
        with open(os.environ["SEEN"], "a") as out:
            where = os.path.dirname(sys.modules["work"].__file__)
            with open(f"/proc/{os.getppid()}/cmdline") as parent:
                started = parent.read().split("\\0")[1]  # "-c" for the server, "-m" fresh
            with open(f"/proc/{os.getppid()}/stat") as parent:
                above = int(parent.read().rsplit(")", 1)[1].split()[1])
            line = [started, [os.getppid(), above], PRELOADED, os.getcwd(), where]
            out.write(json.dumps(line) + "\\n")
    benchmark(work)
"""
).replace("{servers}", SERVERS)

WORK = "def work():\n    return sum(range({n}))\n"
# A test module that looks for torch (``find_spec``) and never imports it: each process of the
# pairs records its parent's way of starting and whether it has torch.
LOOKS = (
    """
import importlib.util
import json
import os
import sys

importlib.util.find_spec("torch")

from work import work

{servers}


def test_timed(benchmark):
    if os.environ.get("HPML_INTERNAL_RERUN"):
        with open(os.environ["SEEN"], "a") as out:
            with open(f"/proc/{os.getppid()}/cmdline") as parent:
                started = parent.read().split("\\0")[1]
            out.write(json.dumps([started, "torch" in sys.modules]) + "\\n")
    benchmark(work)
"""
).replace("{servers}", SERVERS)


def test_the_pairs_processes_are_forked_with_torch_imported_and_each_sides_code(
    project: Project, tmp_path: Path
) -> None:
    """Every process of the pairs comes from the one server (torch imported before its test
    module imported it) and runs its side's code: 4x the work in the working tree regresses."""
    seen = tmp_path / "seen.txt"
    project.monkeypatch.setenv("SEEN", str(seen))
    repo = committed(project, work=WORK.format(n=20_000), test_inner=SEEN)
    repo.pytester.makepyfile(work=WORK.format(n=80_000))
    result = repo.run_subprocess("--hpml-against=HEAD", BENCH_TIME, "--hpml-pairs=3")
    assert result.ret == pytest.ExitCode.TESTS_FAILED, result.stdout.str()
    verdicts = {test.split("::")[1]: v for (test, _), v in repo.verdicts(result).items()}
    assert verdicts == {"test_timed": "regressed"}
    assert "no fork server" not in result.stdout.str()
    lines = [json.loads(line) for line in seen.read_text().splitlines()]
    runs = [line for line in lines if line[0] != "collecting"]
    # the server started when the collection began importing torch, not after it
    [[_, collecting]] = [line for line in lines if line[0] == "collecting"]
    assert len(collecting) == 1
    assert len(runs) == 6  # 3 pairs of 2
    assert {started for started, _, _, _, _ in runs} == {"-c"}  # the server, not pytest
    # one for both sides: the process that the server started collecting forked, once it had
    # imported the collection's libraries
    [(parent, above)] = {tuple(parents) for _, parents, _, _, _ in runs}
    assert [above] == collecting
    # torch, what its optimizers import (torch._dynamo) and the libraries came with the fork
    assert all(preloaded == [True, True, True] for _, _, preloaded, _, _ in runs)
    assert still_running([parent, above]) == []
    head = [where for _, _, _, cwd, where in runs if cwd == str(repo.path)]
    base = [where for _, _, _, cwd, where in runs if cwd != str(repo.path)]
    assert head == [str(repo.path)] * 3  # the head's code, from the working tree
    assert len(base) == 3
    assert all("pytest-hpml-base-" in where for where in base)


def test_a_server_started_by_a_look_for_torch_ends_where_the_collection_never_imported_it(
    project: Project, tmp_path: Path
) -> None:
    """Looking for torch starts a server as its import would; at the end of collection,
    without torch imported, it ends, and the pairs' processes start fresh, without torch.
    (``-q``: the lines after collection, which describe the head side, import torch.)"""
    seen = tmp_path / "seen.txt"
    project.monkeypatch.setenv("SEEN", str(seen))
    repo = committed(project, work=WORK.format(n=20_000), test_inner=LOOKS)
    result = repo.run_subprocess("-q", "--hpml-against=HEAD", BENCH_TIME, "--hpml-pairs=3")
    assert "no fork server" not in result.stdout.str()  # none was kept: nothing to explain
    lines = [json.loads(line) for line in seen.read_text().splitlines()]
    [[_, collecting]] = [line for line in lines if line[0] == "collecting"]
    assert len(collecting) == 1  # started when the test module looked for torch
    runs = [line for line in lines if line[0] != "collecting"]
    assert len(runs) == 6, result.stdout.str()
    assert all(started != "-c" and not torch for started, torch in runs), runs
    assert still_running(collecting) == []


# Run as ``python -c`` with the server's address, pid and interpreter: asks the server, as a
# process of the pairs does, for a process that writes its pid and waits; then waits itself.
ASKS = """
import os, sys, time
from pytest_hpml.bench.forkserver import Client

address, pid, python, tree, out = sys.argv[1:6]
with open(out, "w") as log:
    env = {**os.environ, "PYTHONPATH": tree}
    fd = log.fileno()
    client = Client(address, int(pid), python)  # kept: its connection is what it asked for
    child = client.popen(
        [python, "-m", "waits"], cwd=tree, env=env, output=(fd, fd), session=True
    )
print(child.pid, flush=True)
time.sleep(60)
"""


def test_what_a_connected_process_asked_for_ends_with_it(server: Server, tree: Path) -> None:
    """A process of the pairs asks the server for ranks on a connection of its own: each
    comes in a session of its own, writes where it was told to, and is killed once the
    process that asked ends, however it ends (here SIGKILL)."""
    (tree / "tree" / "waits.py").write_text(
        "import os, time\nprint('up', os.getpid(), flush=True)\ntime.sleep(60)\n"
    )
    assert server.ready()
    assert server.address
    log = tree / "out.txt"
    where = [server.address, str(server.pid), server.python, str(tree / "tree"), str(log)]
    asking = subprocess.Popen(
        [sys.executable, "-c", ASKS, *where], stdout=subprocess.PIPE, text=True
    )
    try:
        forked = int(asking.stdout.readline())  # type: ignore[union-attr]
        up = _waited_for(lambda: log.read_text())
        assert up == f"up {forked}\n"
        assert os.getpgid(forked) == forked  # the leader of a group of its own
        with open(f"/proc/{forked}/stat") as stat:
            assert int(stat.read().rsplit(")", 1)[1].split()[1]) == server.pid  # its parent
    finally:
        asking.kill()
        asking.wait()
        asking.stdout.close()  # type: ignore[union-attr]
    assert still_running([forked], seconds=30) == []
    assert server.ready()  # and the server serves on


def _waited_for(value: Any, seconds: float = 30.0) -> Any:
    """``value()`` once it is true (polled), or its last value after ``seconds``."""
    import time

    deadline = time.monotonic() + seconds
    while not (found := value()) and time.monotonic() < deadline:
        time.sleep(0.02)
    return found
