"""Processes and shared memory, as the lectures on ``torch.multiprocessing`` teach them.

A tensor put on a ``torch.multiprocessing`` queue travels as a handle to shared memory: the
receiver works on the sender's memory, and a tensor that was not shared yet is moved to shared
memory once, on its way out (``share_memory_()``). So sending a tensor that already lives in
shared memory is nearly free, and the lecture's tip is to reuse such buffers (a benchmark
measures the ratio). Hogwild-style training builds on the same sharing: processes update one
model's shared parameters without locks. Finally the three start methods (fork, spawn,
forkserver) all run DataLoader workers, and with CUDA in use only spawn does.

Every child is joined with a timeout and terminated in a ``finally`` block, queues wait on
``get`` with a timeout, and a fixture checks that no test leaves a child process behind: a
broken child fails its test instead of hanging the session. Fork is used where the start method
is not the subject, since spawn and forkserver start a fresh interpreter that imports torch
(2-4 s each on the 2-core CI machine).
"""

from __future__ import annotations

import contextlib
import math
import os
import time
from collections.abc import Iterator
from queue import Empty
from typing import Any, Callable

import pytest
import torch
import torch.multiprocessing as mp
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Dataset

from suites.models import digits, mlp, train_step

# Long enough for a spawned interpreter to import torch on a loaded 2-core machine (2-4 s
# idle), short enough that a broken child fails the test in a minute rather than hanging it.
TIMEOUT = 60.0
START_METHODS = ("fork", "spawn", "forkserver")


@pytest.fixture(autouse=True)
def no_child_left_behind() -> Iterator[None]:
    """Fail a test that leaves a child process running (one started during the test)."""
    before = {p.pid for p in mp.active_children()}
    yield
    left = [p for p in mp.active_children() if p.pid not in before]
    for p in left:  # do not let them outlive the failure either
        p.kill()
        p.join(5)
    assert not left, f"child processes left running: {left}"


@contextlib.contextmanager
def children(
    ctx: Any, target: Callable[..., None], args: tuple[Any, ...], count: int = 1
) -> Iterator[list[Any]]:
    """Start ``count`` processes running ``target(*args, rank)``; in the end wait for them (up
    to :data:`TIMEOUT`, or a second when the body failed), then terminate and kill whatever
    still runs."""
    processes = [
        ctx.Process(target=target, args=(*args, rank), daemon=True) for rank in range(count)
    ]
    grace = 1.0
    try:
        for process in processes:
            process.start()
        yield processes
        grace = TIMEOUT
    finally:
        deadline = time.monotonic() + grace
        for process in processes:
            if process.pid is not None:
                process.join(max(0.0, deadline - time.monotonic()))
        for process in processes:
            if process.pid is not None and process.is_alive():
                process.terminate()
                process.join(5)
                if process.is_alive():
                    process.kill()
                    process.join(5)


@contextlib.contextmanager
def queues(ctx: Any, count: int) -> Iterator[list[Any]]:
    """``count`` queues, closed in the end without waiting on a reader that may be gone."""
    made = [ctx.Queue() for _ in range(count)]
    try:
        yield made
    finally:
        for queue in made:
            queue.cancel_join_thread()  # a dead reader must not block the feeder thread's exit
            queue.close()


def receive(queue: Any, processes: list[Any]) -> Any:
    """The next item on ``queue``; a failure as soon as one of ``processes`` has died instead
    of sending it, or after :data:`TIMEOUT`."""
    deadline = time.monotonic() + TIMEOUT
    while True:
        try:
            return queue.get(timeout=0.2)
        except Empty:
            codes = [process.exitcode for process in processes]
            if any(code not in (None, 0) for code in codes):
                pytest.fail(f"a child process died: exit codes {codes}")
            if time.monotonic() > deadline:
                pytest.fail(f"nothing arrived from the children in {TIMEOUT:.0f} s")


def join_all(processes: list[Any]) -> None:
    """Wait for ``processes`` to end and check that each exited cleanly."""
    for process in processes:
        process.join(TIMEOUT)
    codes = [process.exitcode for process in processes]
    assert codes == [0] * len(processes), f"exit codes {codes} (None: still running)"


# --- a tensor through a queue ---------------------------------------------------------------


def _negate_received(inbox: Any, outbox: Any, rank: int) -> None:
    """Receive one tensor, report what arrived, then change it in place."""
    tensor = inbox.get(timeout=TIMEOUT)
    outbox.put((tensor.is_shared(), tensor.tolist()))
    tensor.neg_()
    outbox.put("changed")


def test_tensor_sent_through_a_queue_is_shared_not_copied() -> None:
    base = torch.arange(12, dtype=torch.float32)
    view = base[4:8]  # a view: the whole storage moves, the receiver gets the same window of it
    assert not base.is_shared()
    pointer = base.data_ptr()
    ctx = mp.get_context("fork")
    with (
        queues(ctx, 2) as (inbox, outbox),
        children(ctx, _negate_received, (inbox, outbox)) as processes,
    ):
        inbox.put(view)
        arrived_shared, values = receive(outbox, processes)
        assert receive(outbox, processes) == "changed"
        join_all(processes)

    assert arrived_shared, "the receiver got a tensor outside shared memory"
    assert values == [4.0, 5.0, 6.0, 7.0]
    # put() moved the sender's own storage to shared memory (share_memory_() semantics: same
    # tensor object, values kept, new memory). It happens when the queue's feeder thread
    # pickles the tensor, so it is checked only once the receiver has it: right after put()
    # the tensor may not be shared yet.
    assert base.is_shared()
    assert view.is_shared()
    assert base.data_ptr() != pointer, "an unshared tensor must be moved to shared memory"
    # The receiver's in-place change is in the sender's memory: no copy was made, and only
    # the window that was sent changed.
    expected = torch.arange(12, dtype=torch.float32)
    expected[4:8].neg_()
    assert torch.equal(base, expected)


def test_tensor_already_shared_is_sent_without_moving() -> None:
    buffer = torch.zeros(6).share_memory_()
    pointer = buffer.data_ptr()
    assert buffer.share_memory_() is buffer
    assert buffer.data_ptr() == pointer, "share_memory_() on a shared tensor must be a no-op"
    ctx = mp.get_context("fork")
    with (
        queues(ctx, 2) as (inbox, outbox),
        children(ctx, _negate_received, (inbox, outbox)) as processes,
    ):
        buffer.fill_(3.0)
        inbox.put(buffer)
        assert receive(outbox, processes) == (True, [3.0] * 6)
        assert receive(outbox, processes) == "changed"
        join_all(processes)
    assert buffer.data_ptr() == pointer, "a shared tensor was moved again"
    assert torch.equal(buffer, torch.full((6,), -3.0))


# --- benchmark: reuse a shared buffer -------------------------------------------------------

# 8 MiB of float32: a batch of a few dozen images. Measured here: 2-5 ms per round trip for the
# shared buffer, 7-16 ms for a fresh tensor (a new shared-memory file, a copy, page faults).
MESSAGE_ELEMENTS = 2 << 20


def _acknowledge(inbox: Any, acks: Any, rank: int) -> None:
    """A long-lived consumer: answer each tensor with its last element, until ``None``."""
    torch.set_num_threads(1)
    while (tensor := inbox.get(timeout=TIMEOUT)) is not None:
        acks.put(float(tensor[-1]))
        del tensor  # drop the mapping before waiting for the next one


# IPC round trips are scheduler- and syscall-bound, which the compute-bound reference workload
# tracks poorly: recorded in 6 processes on the shared 2-core VM, the per-process medians in
# reference units spread from 0.72 to 1.32 (fresh) and 0.19 to 0.51 (shared), the ratio from
# 2.7 to 3.7. So times and ratio are judged with wide margins; the effect is ~3x, and losing
# it (a ratio of ~1, -67%) still shows.
@pytest.mark.hpml_bench(threshold=0.5)
def test_sending_a_shared_tensor_is_faster_than_an_unshared_one(benchmark: Any) -> None:
    data = torch.randn(MESSAGE_ELEMENTS)
    buffer = torch.empty_like(data).share_memory_()  # allocated once, reused for every message
    ctx = mp.get_context("fork")
    with queues(ctx, 2) as (inbox, acks), children(ctx, _acknowledge, (inbox, acks)) as processes:

        def send(tensor: torch.Tensor) -> float:
            inbox.put(tensor)
            return receive(acks, processes)  # the consumer is done with the tensor

        def shared() -> float:
            buffer.copy_(data)  # both variants write the message once; only the memory differs
            return send(buffer)

        def fresh() -> float:
            return send(data.clone())  # a new pageable tensor: moved to shared memory on put

        benchmark.variants({"fresh": fresh, "shared": shared}, baseline="fresh", tolerance=0.5)
        assert shared() == fresh() == float(data[-1])
        inbox.put(None)
        join_all(processes)


# --- Hogwild ---------------------------------------------------------------------------------

HOGWILD_PROCESSES = 2
HOGWILD_EPOCHS = 4
HOGWILD_BATCH = 32
HOGWILD_LR = 0.1


def _hogwild_train(
    model: nn.Module,
    images: torch.Tensor,
    labels: torch.Tensor,
    start: Any,
    results: Any,
    rank: int,
) -> None:
    """Train the shared ``model`` on this rank's share of the data, without any lock."""
    torch.set_num_threads(1)  # two processes on two cores: one thread each
    torch.manual_seed(rank)
    # Made before the barrier, so that the processes really train at the same time, racing on
    # the parameters.
    optimizer = torch.optim.SGD(model.parameters(), lr=HOGWILD_LR)  # steps the shared tensors
    images, labels = images[rank::HOGWILD_PROCESSES], labels[rank::HOGWILD_PROCESSES]
    start.wait(timeout=TIMEOUT)
    steps = 0
    for _ in range(HOGWILD_EPOCHS):
        for batch in torch.randperm(len(images)).split(HOGWILD_BATCH):
            train_step(model, optimizer, images[batch], labels[batch])
            steps += 1
    results.put((rank, steps))


def full_loss(model: nn.Module, images: torch.Tensor, labels: torch.Tensor) -> float:
    with torch.no_grad():
        return F.cross_entropy(model(images), labels).item()


def test_hogwild_training_of_a_shared_model_lowers_the_loss() -> None:
    images, labels = digits()
    model = mlp()
    model.share_memory()
    assert all(p.is_shared() for p in model.parameters())
    initial = [p.detach().clone() for p in model.parameters()]
    untrained = full_loss(model, images, labels)

    # A process's first optimizer imports dynamo (~1.5 s of CPU): imported once here, forked
    # children inherit it instead of each importing it on the shared cores.
    import torch._dynamo

    ctx = mp.get_context("fork")
    start = ctx.Barrier(HOGWILD_PROCESSES)
    args = (model, images, labels, start)
    with (
        queues(ctx, 1) as (results,),
        children(ctx, _hogwild_train, (*args, results), count=HOGWILD_PROCESSES) as processes,
    ):
        done = sorted(receive(results, processes) for _ in processes)
        join_all(processes)
    shards = [len(range(rank, len(images), HOGWILD_PROCESSES)) for rank in range(len(done))]
    assert done == [
        (rank, HOGWILD_EPOCHS * math.ceil(n / HOGWILD_BATCH)) for rank, n in enumerate(shards)
    ]

    # The children stepped the parent's own parameters: they live in shared memory.
    for before, after in zip(initial, model.parameters()):
        assert not torch.equal(before, after), "a parameter was not updated in the parent"
    trained = full_loss(model, images, labels)
    # 232 lock-free SGD steps (116 a process) take the digits MLP from 2.35 to ~0.14 (measured).
    assert trained < 0.25 * untrained, f"loss {untrained:.3f} -> {trained:.3f}"


# --- DataLoader workers under each start method ---------------------------------------------

# Set in the parent during a test: a forked worker inherits it, a spawned (or forkserver) one
# imports this module afresh and sees False.
_SET_IN_PARENT = False


class NumberedSamples(Dataset):
    """Sample i is a small tensor made from i, its label, and where it was made (worker pid and
    whether the parent's module state was inherited). Module-level so spawn can pickle it."""

    def __init__(self, length: int = 23) -> None:
        self.length = length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int, int, bool]:
        sample = torch.arange(4, dtype=torch.float32) * 0.5 + index
        return sample, index % 3, os.getpid(), _SET_IN_PARENT


def load(loader: DataLoader) -> tuple[list[tuple[torch.Tensor, torch.Tensor]], set[int], set[bool]]:
    """The batches' samples and labels, and the pids and inheritance flags that made them."""
    batches, pids, flags = [], set(), set()
    for samples, labels, pid, inherited in loader:
        batches.append((samples, labels))
        pids.update(pid.tolist())
        flags.update(inherited.tolist())
    return batches, pids, flags


@pytest.mark.parametrize("method", START_METHODS)
def test_dataloader_workers_run_under_each_start_method(
    method: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(f"{__name__}._SET_IN_PARENT", True)
    dataset = NumberedSamples()
    expected, pids, _ = load(DataLoader(dataset, batch_size=4))
    assert pids == {os.getpid()}

    loader = DataLoader(
        dataset,
        batch_size=4,
        num_workers=2,
        multiprocessing_context=method,
        timeout=TIMEOUT,  # a worker that hangs fails the test instead of the session
    )
    batches, pids, flags = load(loader)

    assert len(batches) == len(expected) == 6
    for (samples, labels), (want_samples, want_labels) in zip(batches, expected):
        assert torch.equal(samples, want_samples)
        assert torch.equal(labels, want_labels)
    assert os.getpid() not in pids, "the parent loaded samples itself"
    assert len(pids) == 2, "both workers should have loaded batches"
    # fork copies the parent's memory; spawn and forkserver start from a fresh interpreter.
    assert flags == {method == "fork"}


# --- CUDA: spawn ------------------------------------------------------------------------------


class CudaSquares(Dataset):
    """Squares computed on the GPU inside the worker, returned on the CPU (workers should not
    hand CUDA tensors to the parent)."""

    def __len__(self) -> int:
        return 8

    def __getitem__(self, index: int) -> torch.Tensor:
        return (torch.full((3,), float(index), device="cuda") ** 2).cpu()


@pytest.mark.device("cuda")
def test_cuda_in_dataloader_workers_needs_spawn(device: torch.device) -> None:
    torch.zeros(1, device=device)  # the parent has a CUDA context, as a training script does
    expected = torch.stack([torch.full((3,), float(i) ** 2) for i in range(8)]).split(4)

    forked = DataLoader(
        CudaSquares(), batch_size=4, num_workers=1, multiprocessing_context="fork", timeout=TIMEOUT
    )
    with pytest.raises(RuntimeError, match="Cannot re-initialize CUDA in forked subprocess"):
        list(forked)

    spawned = DataLoader(
        CudaSquares(), batch_size=4, num_workers=1, multiprocessing_context="spawn", timeout=TIMEOUT
    )
    batches = list(spawned)
    assert len(batches) == len(expected)
    assert all(torch.equal(got, want) for got, want in zip(batches, expected))


def _add_one_on_gpu(inbox: Any, outbox: Any, rank: int) -> None:
    tensor = inbox.get(timeout=TIMEOUT)
    outbox.put(tensor.device.type)
    tensor.add_(1)
    torch.cuda.synchronize()  # the change must be done before the sender is told
    del tensor  # release the IPC handle before the sender may free the memory
    outbox.put("changed")


@pytest.mark.device("cuda")
def test_cuda_tensor_sent_to_a_spawned_process_is_shared(device: torch.device) -> None:
    tensor = torch.zeros(1000, device=device)
    ctx = mp.get_context("spawn")  # a CUDA context in the parent rules out fork
    with (
        queues(ctx, 2) as (inbox, outbox),
        children(ctx, _add_one_on_gpu, (inbox, outbox)) as processes,
    ):
        inbox.put(tensor)
        kind = receive(outbox, processes)
        assert receive(outbox, processes) == "changed"
        join_all(processes)
    assert kind == "cuda", "the receiver got a copy on another device"
    # The sender must keep the tensor alive while the receiver uses it (CUDA IPC); then it sees
    # the receiver's change in its own GPU memory.
    assert torch.equal(tensor.cpu(), torch.ones(1000))
