"""Device-agnostic PyTorch, as the CUDA lectures teach it.

Code written against a ``torch.device`` runs unchanged on every device; ``CUDA_VISIBLE_DEVICES``
hides and renumbers GPUs; pinned host memory makes copies asynchronous, and a copy overlaps
compute only on another stream. Tests taking ``device``/``precision`` run once per selected
device and precision (``--hpml-device``, ``--hpml-precision``).

GPU facts are queried in subprocesses so that the pytest process never creates a CUDA context
for them (a context in the parent breaks a later ``fork``).
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from typing import Any, Callable

import pytest
import torch
import torch.nn.functional as F

from pytest_hpml import Precision
from suites.models import image_batch, tiny_cnn

# What a child process sees: its GPUs, and whether a tensor one past the last one can be made.
_PROBE = """
import json, torch
count = torch.cuda.device_count()
gpus = []
for i in range(count):
    p = torch.cuda.get_device_properties(i)
    gpus.append({"name": p.name, "uuid": str(p.uuid)})
try:
    torch.zeros(1, device=f"cuda:{count}")
    past_last = "created"
except (RuntimeError, AssertionError):  # AssertionError: a torch built without CUDA
    past_last = "refused"
print(json.dumps({"count": count, "gpus": gpus, "past_last": past_last}))
"""

# About half a second of GPU spinning at H100 clocks: far longer than the host needs to issue
# a copy and look at an event, even on a loaded machine.
_SLEEP_CYCLES = 1_000_000_000
_COPY_ELEMENTS = 1 << 20  # 4 MiB of float32: a real DMA transfer, still well under a millisecond


def is_on(tensor: torch.Tensor, device: torch.device) -> bool:
    """Whether ``tensor`` lives on ``device``; ``cuda`` without an index means any CUDA device."""
    if tensor.device.type != device.type:
        return False
    return device.index is None or tensor.device.index == device.index


def probe_child(visible: str | None = None) -> dict[str, Any]:
    """Run :data:`_PROBE` in a fresh interpreter, with ``CUDA_VISIBLE_DEVICES=visible`` if given."""
    env = dict(os.environ)
    if visible is not None:
        env["CUDA_VISIBLE_DEVICES"] = visible
    child = subprocess.run(
        [sys.executable, "-c", _PROBE], env=env, capture_output=True, text=True, timeout=120
    )
    assert child.returncode == 0, f"probe failed:\n{child.stderr}"
    return json.loads(child.stdout.splitlines()[-1])


def logits_and_grads(
    model: torch.nn.Module, images: torch.Tensor, labels: torch.Tensor, precision: Precision | None
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Forward under ``precision``'s autocast (plain fp32 for None), fp32 loss, backward."""
    model.zero_grad(set_to_none=True)
    if precision is None:
        logits = model(images)
    else:
        with precision.autocast():
            logits = model(images)
    # The loss is taken in fp32 outside autocast, as in a mixed-precision training loop.
    F.cross_entropy(logits.float(), labels).backward()
    grads = {name: p.grad for name, p in model.named_parameters() if p.grad is not None}
    return logits.detach(), grads


# Ops whose result must stay on their input's device; each also runs on the CPU for the values.
_OPS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "add": lambda t: t + 1,
    "matmul": lambda t: t @ t.T,
    "sum": lambda t: t.sum(dim=0),
    "relu": lambda t: torch.relu(t - 5),
    "mask": lambda t: t[t > 5],
    # A 0-dim CPU tensor may join a tensor on any device without pulling the result to the CPU.
    "cpu_scalar": lambda t: t * torch.tensor(2.0),
}


def test_tensor_created_on_device_stays_there(device: torch.device) -> None:
    reference = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    x = torch.arange(12, dtype=torch.float32, device=device).reshape(3, 4)
    assert is_on(x, device)
    assert is_on(torch.ones_like(x), device), "*_like factories keep the device"

    for name, op in _OPS.items():
        result = op(x)
        assert result.device == x.device, f"{name} moved its result to {result.device}"
        # Small integers: exact on every device and in TF32, so the values must be equal.
        assert torch.equal(result.cpu(), op(reference)), name

    on_cpu = x.to("cpu")
    assert on_cpu.device.type == "cpu"
    assert torch.equal(on_cpu, reference)
    back = on_cpu.to(device)
    assert back.device == x.device
    assert torch.equal(back.cpu(), reference)
    assert x.to(device) is x, ".to() onto the device a tensor is on already must not copy"


def test_model_moved_to_device_matches_cpu(device: torch.device, precision: Precision) -> None:
    model = tiny_cnn()
    images, labels = image_batch()
    expected_logits, expected_grads = logits_and_grads(model, images, labels, None)

    moved = copy.deepcopy(model)
    assert moved.to(device) is moved, "Module.to moves the parameters in place"
    assert all(is_on(p, device) for p in moved.parameters())
    logits, grads = logits_and_grads(moved, images.to(device), labels.to(device), precision)

    assert is_on(logits, device)
    assert grads.keys() == expected_grads.keys()
    precision.assert_close(logits, expected_logits)
    precision.assert_close(grads, expected_grads)


def test_autocast_gives_precision_dtype_and_keeps_params_fp32(
    device: torch.device, precision: Precision
) -> None:
    model = tiny_cnn().to(device)
    images, labels = (t.to(device) for t in image_batch())
    square = torch.randn(8, 8, device=device)

    with precision.autocast():
        outputs = {
            "matmul": square @ square,
            "linear": F.linear(square, square),
            "conv2d": model.conv1(images),
            "model": model(images),
        }
        # Autocast casts copies of the weights per op; the parameters themselves stay fp32.
        assert {p.dtype for p in model.parameters()} == {torch.float32}
    assert {name: out.dtype for name, out in outputs.items()} == dict.fromkeys(
        outputs, precision.dtype
    )

    F.cross_entropy(outputs["model"].float(), labels).backward()
    for name, param in model.named_parameters():
        assert param.dtype == torch.float32, name
        assert param.grad is not None, f"{name} got no gradient"
        assert param.grad.dtype == torch.float32, f"{name}.grad is {param.grad.dtype}"
        assert is_on(param.grad, device), name


def test_hidden_gpus_are_invisible_to_a_child() -> None:
    child = probe_child(visible="")
    assert child == {"count": 0, "gpus": [], "past_last": "refused"}


@pytest.fixture(scope="module")
def parent_gpus() -> tuple[list[str], list[dict[str, str]]]:
    """The CUDA_VISIBLE_DEVICES entries of this process and the GPUs they are, in its order."""
    gpus = probe_child()["gpus"]
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    # A child's CUDA_VISIBLE_DEVICES indexes the physical GPUs, not the parent's numbering, so
    # a parent that was restricted already hands its own entries on.
    entries = [e.strip() for e in visible.split(",")] if visible else []
    return (entries or [str(i) for i in range(len(gpus))])[: len(gpus)], gpus


@pytest.mark.gpu(count=2)
@pytest.mark.parametrize("order", [(1,), (1, 0)], ids=["1", "1,0"])
def test_cuda_visible_devices_renumbers(
    order: tuple[int, ...], parent_gpus: tuple[list[str], list[dict[str, str]]]
) -> None:
    entries, gpus = parent_gpus
    child = probe_child(visible=",".join(entries[i] for i in order))
    # The child's cuda:0 is the parent's cuda:order[0], and so on; nothing exists past them.
    assert child == {
        "count": len(order),
        "gpus": [gpus[i] for i in order],
        "past_last": "refused",
    }


def keep_gpu_busy() -> torch.cuda.Event:
    """Spin the current stream for :data:`_SLEEP_CYCLES`; the event completes when it stops."""
    if os.environ.get("CUDA_LAUNCH_BLOCKING") == "1":
        pytest.skip("CUDA_LAUNCH_BLOCKING=1 makes every kernel launch wait for the GPU")
    torch.cuda.synchronize()
    torch.cuda._sleep(_SLEEP_CYCLES)  # private but long-standing; PyTorch's own tests use it
    done = torch.cuda.Event()
    done.record()
    return done


@pytest.mark.device("cuda")
def test_pinned_memory_copies_without_blocking_the_host(device: torch.device) -> None:
    host = torch.arange(_COPY_ELEMENTS, dtype=torch.float32)
    pinned = host.pin_memory()
    assert pinned.is_pinned()
    assert not host.is_pinned()
    with torch.cuda.device(device):
        on_gpu = torch.empty(_COPY_ELEMENTS, device=device)  # allocated before: cudaMalloc syncs
        back = torch.empty(_COPY_ELEMENTS, pin_memory=True)

        busy = keep_gpu_busy()
        on_gpu.copy_(pinned, non_blocking=True)
        upload_returned_early = not busy.query()
        torch.cuda.synchronize()

        busy = keep_gpu_busy()
        back.copy_(on_gpu, non_blocking=True)
        download_returned_early = not busy.query()
        torch.cuda.synchronize()  # the values may be read only now

    assert upload_returned_early, "copy_ from pinned memory waited for the GPU"
    assert download_returned_early, "copy_ into pinned memory waited for the GPU"
    assert torch.equal(on_gpu.cpu(), host)
    assert torch.equal(back, host)


@pytest.mark.device("cuda")
def test_copy_on_a_side_stream_overlaps_compute(device: torch.device) -> None:
    pinned = torch.arange(_COPY_ELEMENTS, dtype=torch.float32).pin_memory()
    with torch.cuda.device(device):
        on_gpu = torch.empty(_COPY_ELEMENTS, device=device)
        side = torch.cuda.Stream()
        busy = keep_gpu_busy()  # "compute" on the default stream
        with torch.cuda.stream(side):
            on_gpu.copy_(pinned, non_blocking=True)
            copied = torch.cuda.Event()
            copied.record()
        copied.synchronize()
        compute_still_running = not busy.query()
        torch.cuda.synchronize()
    assert compute_still_running, "the copy finished only after the compute on the other stream"
    assert torch.equal(on_gpu.cpu(), pinned)
