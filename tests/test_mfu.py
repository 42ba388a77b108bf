"""MFU: achieved FLOP/s over the device's dense peak, from the table of GPUs, the
--hpml-peak-flops option or the pytest_hpml_peak_flops hook (Note [MFU]).

The table and the arithmetic are checked with made-up device properties (what
``torch.cuda.get_device_properties`` returns: a name, a compute capability, SMs); the plugin's
behaviour on this machine's CPU, where only a given peak makes an ``mfu``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

import pytest
import torch

from pytest_hpml.bench import metrics, mfu
from pytest_hpml.bench.fixture import Peaks
from pytest_hpml.bench.measure import Series
from pytest_hpml.bench.work import FlopKey, count_flops_by_key
from pytest_hpml.fixtures.precision import tf32
from pytest_hpml.hardware import peaks

if TYPE_CHECKING:
    from tests.conftest import Project

H100 = SimpleNamespace(name="NVIDIA H100 80GB HBM3", major=9, minor=0, multi_processor_count=132)
MATMUL_8192 = 2 * 8192**3  # FLOPs of an 8192x8192 by 8192x8192 matmul


@pytest.mark.parametrize(
    ("name", "model"),
    [
        ("NVIDIA H100 80GB HBM3", "H100 SXM"),
        ("NVIDIA H100", "H100 SXM"),
        ("NVIDIA H100 80GB HBM3 MIG 1g.10gb", "H100 SXM"),
        ("NVIDIA H100 PCIe", "H100 PCIe"),
        ("NVIDIA H100 NVL", None),  # another part, not in the table
        ("NVIDIA H200", "H200 SXM"),
        ("NVIDIA H200 NVL", None),
        ("NVIDIA GH200 480GB", None),
        ("NVIDIA A100-SXM4-40GB", "A100"),
        ("NVIDIA A100-SXM4-80GB", "A100"),
        ("NVIDIA A100 80GB PCIe", "A100"),
        ("NVIDIA A100-PCIE-40GB", "A100"),
        ("NVIDIA L4", "L4"),
        ("NVIDIA L40S", "L40S"),
        ("NVIDIA L40", None),
        ("NVIDIA A10G", "A10G"),
        ("NVIDIA A10", None),
        ("Tesla T4", "T4"),
        ("Tesla V100-SXM2-16GB", "V100 SXM2"),
        ("Tesla V100-SXM2-32GB", "V100 SXM2"),
        ("Tesla V100-PCIE-32GB", "V100 PCIe"),
        ("Tesla V100S-PCIE-32GB", "V100S PCIe"),
        ("NVIDIA GeForce RTX 4090", "GeForce RTX 4090"),
        ("NVIDIA GeForce RTX 4090 D", None),
        ("NVIDIA GeForce RTX 4090 Laptop GPU", None),
        ("NVIDIA GeForce RTX 3090", None),
    ],
)
def test_the_table_finds_each_gpu_by_the_name_torch_gives_it(name: str, model: str | None) -> None:
    found = peaks.find(name)
    assert (found.model if found else None) == model


def test_every_entry_names_its_source_and_its_figures_are_dense() -> None:
    for gpu in peaks.TABLE:
        assert "NVIDIA" in gpu.source
        assert "datasheet" in gpu.source or "whitepaper" in gpu.source
        figures = gpu.flops
        assert set(figures) <= {"fp32", "tf32", "bf16", "fp16", "fp8"}
        assert figures["fp32"] < figures["fp16"]  # tensor cores, every GPU of the table
        if "bf16" in figures:
            assert figures["bf16"] == figures["fp16"]
            assert figures["fp32"] <= figures["tf32"] <= figures["bf16"]
        if "fp8" in figures:  # twice bf16; sparse figures would be twice again
            assert figures["fp8"] == pytest.approx(2 * figures["bf16"], rel=0.03)


@pytest.mark.parametrize(
    ("name", "precision", "tflops"),
    [
        ("NVIDIA H100 80GB HBM3", "bf16", 989.4),
        ("NVIDIA H100 80GB HBM3", "tf32", 494.7),
        ("NVIDIA H100 80GB HBM3", "fp32", 66.9),
        ("NVIDIA H100 80GB HBM3", "fp8", 1978.9),
        ("NVIDIA H100 PCIe", "bf16", 756),
        ("NVIDIA H200", "bf16", 989.5),
        ("NVIDIA A100-SXM4-80GB", "tf32", 156),
        ("NVIDIA A100-SXM4-40GB", "bf16", 312),
        ("NVIDIA L4", "fp16", 121),
        ("NVIDIA L40S", "fp8", 733),
        ("NVIDIA A10G", "bf16", 125),
        ("Tesla T4", "fp16", 65),
        ("Tesla V100-SXM2-16GB", "fp16", 125),
        ("NVIDIA GeForce RTX 4090", "bf16", 165.2),
        ("Tesla T4", "bf16", None),  # no bf16 tensor cores
        ("NVIDIA A100-SXM4-80GB", "fp8", None),  # nor fp8 ones
        ("NVIDIA A100-SXM4-80GB", "fp64", None),
        ("AMD Instinct MI300X", "bf16", None),
    ],
)
def test_the_peak_of_a_device_described_by_its_properties(
    name: str, precision: str, tflops: float | None
) -> None:
    properties = SimpleNamespace(name=name, major=8, minor=0)
    found = peaks.peak_flops(properties, precision)
    assert found == (None if tflops is None else pytest.approx(tflops * 1e12))


def test_a_mig_slice_has_its_share_of_the_peak() -> None:
    mig = SimpleNamespace(name="NVIDIA H100 80GB HBM3 MIG 1g.10gb", multi_processor_count=16)
    assert peaks.peak_flops(H100, "bf16") == pytest.approx(989.4e12)
    assert peaks.peak_flops(mig, "bf16") == pytest.approx(989.4e12 * 16 / 132)


@pytest.mark.parametrize(
    ("dtype", "tf32_on", "capability", "precision"),
    [
        ("float32", False, (9, 0), "fp32"),
        ("float32", True, (9, 0), "tf32"),
        ("float32", True, (8, 0), "tf32"),
        ("float32", True, (7, 5), "fp32"),  # a T4 has no TF32: true fp32 whatever the flag
        ("float32", True, None, "fp32"),  # the CPU
        ("bfloat16", True, (9, 0), "bf16"),
        ("float16", False, (7, 0), "fp16"),
        ("float8_e4m3fn", False, (9, 0), "fp8"),
        ("float8_e5m2", False, (9, 0), "fp8"),
        ("float64", False, (9, 0), "fp64"),
        ("complex64", False, (9, 0), "complex64"),
    ],
)
def test_the_precision_of_the_dominant_dtype(
    dtype: str, tf32_on: bool, capability: tuple[int, int] | None, precision: str
) -> None:
    assert peaks.precision_of(dtype, tf32=tf32_on, capability=capability) == precision


def test_the_reasons_for_a_missing_peak() -> None:
    assert peaks.missing("cpu", None, "fp32") == "the CPU has no peak in the table"
    assert peaks.missing("mps", None, "fp32") == "the mps device has no peak in the table"
    assert peaks.missing("cuda", "NVIDIA B200", "bf16") == "NVIDIA B200 has no known peak"
    assert peaks.missing("cuda", "Tesla T4", "bf16") == "Tesla T4 has no known bf16 peak"


def test_mfu_is_each_rounds_flop_rate_over_the_peak() -> None:
    """An 8192^3 bf16 matmul in 1.5 ms on an H100 SXM: 733 TFLOP/s, 74% of 989.4."""
    peak = peaks.peak_flops(H100, "bf16")
    assert peak is not None
    series = Series("time", samples=[1.5e-3, 2e-3], cpu_samples=[1e-3, 1e-3], reference=[1, 2])
    found = mfu.record(series, MATMUL_8192, peak, "bf16")
    assert found["samples"] == pytest.approx([0.7409, 0.5557], abs=1e-4)
    assert found["cpu_samples"] == pytest.approx([1.1113, 1.1113], abs=1e-4)
    assert found["reference"] == [1, 2]
    assert (found["peak"], found["precision"], found["unit"]) == (peak, "bf16", "")
    # judged as throughput is: sampled, higher is better, steadied by the reference workload
    assert metrics.is_sampled(found)
    assert metrics.per_second(found)
    assert not metrics.higher_is_worse(found)
    assert not found["portable"]


def key(dtype: str, convolution: bool = False, device: str = "cuda:0") -> FlopKey:
    return FlopKey(device, dtype, convolution)


def test_the_dominant_dtype_and_kind_of_a_step() -> None:
    mixed = {key("bfloat16"): 900, key("float32"): 100, key("float32", True): 50}
    assert mfu.dominant(mixed) == mfu.Dominant("cuda:0", "bfloat16", False)
    convolutions = {key("float32", True): 600, key("float32"): 400}
    assert mfu.dominant(convolutions) == mfu.Dominant("cuda:0", "float32", True)
    tie = {key("float32", device="cuda:1"): 10, key("bfloat16"): 10}
    assert mfu.dominant(tie) == mfu.Dominant("cuda:0", "bfloat16", False)
    assert mfu.dominant({}) is None


def test_tf32_follows_the_flag_of_the_kind_of_operator() -> None:
    with tf32(False):
        assert not peaks.tf32_enabled(convolution=False)
        assert not peaks.tf32_enabled(convolution=True)
    with tf32(True):
        assert peaks.tf32_enabled(convolution=False)
        assert peaks.tf32_enabled(convolution=True)
    with tf32(False):
        torch.backends.cudnn.allow_tf32 = True  # torch's default: convolutions only
        assert not peaks.tf32_enabled(convolution=False)
        assert peaks.tf32_enabled(convolution=True)
        before = torch.get_float32_matmul_precision()
        torch.set_float32_matmul_precision("high")
        try:
            assert peaks.tf32_enabled(convolution=False)
        finally:
            torch.set_float32_matmul_precision(before)


def test_tf32_is_read_from_fp32_precision_once_torch_refuses_the_legacy_flags() -> None:
    """torch >= 2.9 raises on reading ``allow_tf32`` after ``fp32_precision`` was set: in a
    process of its own, not to leave this one's flags in that state."""
    if not hasattr(torch.backends.cuda.matmul, "fp32_precision"):
        pytest.skip("torch before 2.9 has no fp32_precision")
    code = (
        "import torch\n"
        "from pytest_hpml.hardware.peaks import tf32_enabled\n"
        "torch.backends.cuda.matmul.fp32_precision = 'tf32'\n"
        "torch.backends.cudnn.conv.fp32_precision = 'ieee'\n"
        "print(tf32_enabled(False), tf32_enabled(True))\n"
        "torch.backends.cuda.matmul.fp32_precision = 'ieee'\n"
        "print(tf32_enabled(False))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["True", "False", "False"]


def asking(answer: Any) -> tuple[Peaks, list[tuple[str, str]]]:
    """Peaks whose every question is answered with ``answer``, and the questions asked."""
    asked: list[tuple[str, str]] = []

    def ask(device: Any, precision: str) -> Any:
        asked.append((str(device), precision))
        return answer

    return Peaks(ask, lambda: answer is not None), asked


def test_utilization_of_a_cpu_step_with_a_given_peak() -> None:
    a = torch.randn(32, 32)
    tally = count_flops_by_key(lambda: a @ a)
    assert tally == {FlopKey("cpu", "float32", False): 2 * 32**3}
    given, asked = asking(1e9)
    series = Series("time", samples=[1e-4, 2e-4])
    found, why = mfu.utilization(tally, 2 * 32**3, series, given)
    assert why is None
    assert found is not None
    assert found["samples"] == pytest.approx([0.65536, 0.32768])
    assert asked == [("cpu", "fp32")]


def test_utilization_without_a_peak_says_why() -> None:
    given, _ = asking(None)
    tally = {FlopKey("cpu", "bfloat16", False): 100}
    series = Series("time", samples=[1e-4])
    assert mfu.utilization(tally, 100, series, given) == (None, "the CPU has no peak in the table")
    assert mfu.utilization({}, 0, series, given) == (None, None)  # no FLOPs: nothing to say


@pytest.mark.parametrize("answer", ["989e12", -1.0, float("nan"), True])
def test_a_peak_that_is_not_a_positive_number_is_an_error(answer: Any) -> None:
    given, _ = asking(answer)
    tally = {FlopKey("cpu", "float32", False): 100}
    with pytest.raises(ValueError, match=r"expected a positive number of FLOP/s"):
        mfu.utilization(tally, 100, Series("time", samples=[1e-4]), given)


# Inner benchmarks: a matmul (its FLOPs from the work counters), a tracked model (from track()),
# variants, and pure Python (no FLOPs).
STEPS = """
import torch


def test_matmul(benchmark):
    a = torch.randn(48, 48)
    benchmark(lambda: a @ a)


def test_tracked(benchmark):
    model, x = torch.nn.Linear(16, 8), torch.randn(4, 16)
    benchmark.track(model=model)
    benchmark(model, x)


def test_variants(benchmark):
    a = torch.randn(32, 32)
    benchmark.variants({"mm": lambda: a @ a, "twice": lambda: a @ a @ a})


def test_python(benchmark):
    benchmark(sum, range(100))
"""
NO_PEAK = (
    "hpml: mfu not computed: the CPU has no peak in the table; give one with "
    "--hpml-peak-flops or the pytest_hpml_peak_flops hook"
)


def report(project: Project, *args: str) -> dict[str, dict[str, Any]]:
    """Run the steps with ``args``; each test's metrics (name without the file) and the run."""
    project.write_tests(STEPS)
    result = project.bench("--hpml-baseline=off", "--hpml-report=r.json", *args)
    result.assert_outcomes(passed=4)
    found = json.loads((project.path / "r.json").read_text())["results"]
    return {r["test"].partition("::")[2]: r for r in found} | {"run": {"result": result}}


def assert_mfu(record: dict[str, Any], time: dict[str, Any], flops: int, peak: float) -> None:
    assert (record["kind"], record["peak"], record["precision"]) == ("rate", peak, "fp32")
    expected = [flops / t / peak for t in time["samples"]]
    assert record["samples"] == pytest.approx(expected)
    assert record["reference"] == time["reference"]


def test_a_given_peak_makes_an_mfu_for_every_step_with_flops(project: Project, source: str) -> None:
    args = project.configure(source, peak_flops="1e10")
    found = report(project, *args)
    matmul, tracked = found["test_matmul"]["metrics"], found["test_tracked"]["metrics"]
    assert_mfu(matmul["mfu"], matmul["time"], 2 * 48**3, 1e10)
    assert matmul["flops[float32]"]["value"] == 2 * 48**3
    assert_mfu(tracked["mfu"], tracked["time"], tracked["flops"]["value"], 1e10)
    ratios = [m / r for m, r in zip(tracked["mfu"]["samples"], tracked["flop_rate"]["samples"])]
    assert ratios == pytest.approx([1e-10] * len(ratios))  # flop_rate over the peak
    variants = found["test_variants"]["metrics"]
    assert_mfu(variants["mfu[mm]"], variants["time[mm]"], 2 * 32**3, 1e10)
    assert_mfu(variants["mfu[twice]"], variants["time[twice]"], 4 * 32**3, 1e10)
    assert "mfu" not in found["test_python"]["metrics"]
    assert not any(r.get("no_peak") for r in found.values())
    found["run"]["result"].stdout.no_fnmatch_line("*mfu not computed*")


def test_the_cpu_has_no_peak_and_says_so_once(project: Project) -> None:
    found = report(project)
    assert not [name for r in found.values() for name in r.get("metrics", {}) if "mfu" in name]
    result = found["run"]["result"]
    assert [line for line in result.outlines if "mfu" in line] == [NO_PEAK]
    assert found["test_matmul"]["no_peak"] == "the CPU has no peak in the table"
    assert found["test_python"]["no_peak"] is None


HOOK = """
import json


def pytest_hpml_peak_flops(config, device, precision):
    with (config.rootpath / "asked.jsonl").open("a") as out:
        out.write(json.dumps([device.type, precision]) + "\\n")
    return 2e10 if precision == "fp32" else None
"""


def test_a_conftest_hook_gives_the_peak(project: Project) -> None:
    project.pytester.makeconftest(HOOK)
    found = report(project)
    assert found["test_matmul"]["metrics"]["mfu"]["peak"] == 2e10
    asked = (project.path / "asked.jsonl").read_text().splitlines()
    assert set(asked) == {'["cpu", "fp32"]'}


def test_the_option_is_used_before_any_hook_is_asked(project: Project) -> None:
    project.pytester.makeconftest(HOOK)
    found = report(project, "--hpml-peak-flops=3e10")
    assert found["test_matmul"]["metrics"]["mfu"]["peak"] == 3e10
    assert not (project.path / "asked.jsonl").exists()


def test_a_process_that_only_times_counts_the_flops_for_mfu(project: Project) -> None:
    """Recorded in two processes: the second counts no work, yet has its mfu to pool."""
    project.write_tests(STEPS.partition("\n\ndef test_tracked")[0])
    args = ("--hpml-baseline=update", "--hpml-record-processes=2", "--hpml-peak-flops=1e10")
    project.bench(*args).assert_outcomes(passed=1)
    stored = project.stored("machine")["test_inner.py::test_matmul"]
    [other] = stored["mfu"]["processes"]
    [other_time] = stored["time"]["processes"]
    expected = [2 * 48**3 / t / 1e10 for t in other_time["samples"]]
    assert other["samples"] == pytest.approx(expected, rel=1e-3)  # stored to 5 digits


def test_the_docs_show_the_table_as_the_code_has_it() -> None:
    from pathlib import Path

    page = Path(__file__).parents[1] / "docs" / "guides" / "work-counters.md"
    section = page.read_text(encoding="utf-8").partition("\n## MFU\n")[2].partition("\n## ")[0]
    rows = [line.strip("|").split(" | ") for line in section.splitlines() if line.startswith("| ")]
    header, *body = rows
    assert [cell.strip() for cell in header] == [
        "GPU", "fp32", "tf32", "bf16", "fp16", "fp8", "source"
    ]  # fmt: skip
    precisions = ["fp32", "tf32", "bf16", "fp16", "fp8"]
    shown = [
        (cells[0].strip(), [cells[i + 1].strip() for i in range(5)], cells[6].strip())
        for cells in body
    ]
    expected = [
        (
            gpu.model,
            [f"{gpu.flops[p] / 1e12:g}" if p in gpu.flops else "-" for p in precisions],
            gpu.source,
        )
        for gpu in peaks.TABLE
    ]
    assert shown == expected
