"""The input pipeline, as the lectures, the MXNet talk and the book (ch. 5) teach it: a
``Dataset``, a ``Sampler`` and a ``DataLoader`` whose worker processes keep the accelerator fed.

Checked, with torch's real DataLoader and worker processes (``--hpml-loader-workers``): over dataset
sizes, batch sizes, ``drop_last`` and samplers (sequential, random with and without replacement,
subset random, weighted with and without replacement, a custom one), every epoch yields exactly
what the sampler defines (each sample once, where it defines that), in its order, in batches of
the right shape; a seeded generator and ``worker_init_fn`` give the same order and the same
random augmentations on every run. ``pin_memory=True`` gives pinned batches (CUDA);
``persistent_workers`` keeps the same processes across epochs and ``prefetch_factor`` bounds the
batches loaded ahead of use, as documented; a failing sample is reported with its worker and
index, a worker killed from outside is reported instead of waited for.

Benchmarked: 128 JPEG files through the book's augmentations with 0, 2 and 8 workers
(samples/s and speed-ups over 0 workers, the talk's and the book's figures cited); 256 such
images packed into one file against one file each (the talk's binary-format advice); a dataset
bound by per-sample latency, where more workers than cores still help (the lecture's IOPS
argument). Datasets and image files are in ``suites/loading.py``.
"""

from __future__ import annotations

import os
import re
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Callable

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch.utils.data import (
    DataLoader,
    RandomSampler,
    Sampler,
    SequentialSampler,
    Subset,
    SubsetRandomSampler,
    WeightedRandomSampler,
)

from pytest_hpml import settings as hpml_settings
from suites.loading import (
    BOOK_TRANSFORMS,
    FEATURES,
    AugmentedDataset,
    Corrupt,
    ImageFiles,
    IndexDataset,
    Latency,
    PackedJpeg,
    PackedPixels,
    Pictures,
    StridedSampler,
    WhoLoads,
    features,
    loaded,
    seed_this_process,
    seed_worker,
    shut_down,
    write_pictures,
)
from suites.models import threads

# torch warns when a loader has more workers than cores: the benchmarks do so on purpose, and
# --hpml-loader-workers may ask for it.
pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")

# In-process examples cost milliseconds, so they are many; with workers every epoch forks
# processes (0.1-0.5 s on the 2-core VM), so a few cover what processes add: batches crossing
# a queue in order, RNGs seeded per worker.
IN_PROCESS_EXAMPLES = 150


def examples(num_workers: int, with_workers: int) -> settings:
    return settings(
        max_examples=with_workers if num_workers else IN_PROCESS_EXAMPLES,
        suppress_health_check=[HealthCheck.too_slow],
    )


# ---------------------------------------------------------------------------------------------
# Samplers: every epoch yields what the sampler defines, in its order, in the right batches.

SAMPLERS = (
    "sequential",
    "random",
    "random_with_replacement",
    "subset_random",
    "weighted",
    "weighted_without_replacement",
    "strided",  # the custom one
)


@dataclass(frozen=True)
class Case:
    size: int
    batch_size: int
    drop_last: bool
    sampler: str
    seed: int
    num_samples: int = 0  # random with replacement, weighted
    subset: tuple[int, ...] = ()
    weights: tuple[float, ...] = ()
    stride: int = 1

    def make_sampler(self) -> Sampler[int]:
        """A new sampler whose generator starts from ``seed``: two of them draw alike."""
        generator = torch.Generator().manual_seed(self.seed)
        dataset = range(self.size)
        if self.sampler == "sequential":
            return SequentialSampler(dataset)
        if self.sampler == "random":
            return RandomSampler(dataset, generator=generator)
        if self.sampler == "random_with_replacement":
            return RandomSampler(
                dataset, replacement=True, num_samples=self.num_samples, generator=generator
            )
        if self.sampler == "subset_random":
            return SubsetRandomSampler(list(self.subset), generator=generator)
        if self.sampler.startswith("weighted"):
            return WeightedRandomSampler(
                list(self.weights),
                self.num_samples,
                replacement=self.sampler == "weighted",
                generator=generator,
            )
        return StridedSampler(self.size, self.stride)


@st.composite
def cases(draw: st.DrawFn, max_size: int) -> Case:
    size = draw(st.integers(1, max_size))
    kind = draw(st.sampled_from(SAMPLERS))
    extra: dict[str, Any] = {}
    if kind == "random_with_replacement":
        extra["num_samples"] = draw(st.integers(1, 2 * size))
    elif kind == "subset_random":
        extra["subset"] = tuple(draw(st.lists(st.integers(0, size - 1), unique=True)))
    elif kind.startswith("weighted"):
        weight = st.one_of(st.just(0.0), st.floats(0.01, 100.0))
        weights = draw(st.lists(weight, min_size=size, max_size=size))
        if not any(weights):  # the sampler needs one sample it may draw
            weights[draw(st.integers(0, size - 1))] = 1.0
        drawable = sum(w > 0 for w in weights)
        most = 2 * size if kind == "weighted" else drawable  # without replacement: each once
        extra["num_samples"] = draw(st.integers(1, most))
        extra["weights"] = tuple(weights)
    elif kind == "strided":
        extra["stride"] = draw(st.integers(1, size))
    return Case(
        size=size,
        batch_size=draw(st.integers(1, 40)),  # larger than some datasets: no full batch
        drop_last=draw(st.booleans()),
        sampler=kind,
        seed=draw(st.integers(0, 2**32 - 1)),
        **extra,
    )


def assert_follows_definition(case: Case, order: list[int]) -> None:
    """One epoch of indices, as ``case.sampler`` defines it."""
    everything = list(range(case.size))
    if case.sampler == "sequential":
        assert order == everything
    elif case.sampler in ("random", "strided"):
        assert sorted(order) == everything  # every sample exactly once
    elif case.sampler == "subset_random":
        assert sorted(order) == sorted(case.subset)  # every sample of the subset once
    elif case.sampler == "random_with_replacement":
        assert len(order) == case.num_samples
        assert all(0 <= i < case.size for i in order)
    else:  # weighted: never a sample of weight 0; without replacement, none twice
        assert len(order) == case.num_samples
        assert all(case.weights[i] > 0 for i in order), order
        if case.sampler == "weighted_without_replacement":
            assert len(set(order)) == len(order), order


def assert_epochs(case: Case, num_workers: int, epochs: int = 2) -> None:
    """The loader yields, epoch after epoch, exactly a twin sampler's indices in batches."""
    loader = DataLoader(
        IndexDataset(case.size),
        batch_size=case.batch_size,
        drop_last=case.drop_last,
        sampler=case.make_sampler(),
        num_workers=num_workers,
    )
    twin = case.make_sampler()
    full, rest = divmod(len(twin), case.batch_size)
    sizes = [case.batch_size] * full + ([rest] if rest and not case.drop_last else [])
    assert len(loader) == len(sizes)
    for _ in range(epochs):  # the generator moves on: a random sampler's next epoch differs
        order = list(twin)
        assert_follows_definition(case, order)
        batches = list(loader)
        assert [len(indices) for _, indices in batches] == sizes
        for x, indices in batches:
            assert x.shape == (len(indices), FEATURES)
            assert x.dtype == torch.float32
            assert indices.dtype == torch.int64
            assert torch.equal(x, features(indices).reshape(-1, FEATURES))  # rows stay paired
        yielded = [i for _, indices in batches for i in indices.tolist()]
        assert yielded == order[: sum(sizes)]  # what drop_last drops is the incomplete tail


def test_every_epoch_yields_what_the_sampler_defines_in_batches(num_workers: int) -> None:
    @examples(num_workers, with_workers=8)  # 2 epochs each
    @given(case=cases(max_size=60 if num_workers else 300))
    def check(case: Case) -> None:
        assert_epochs(case, num_workers)

    check()


def test_the_definition_check_fails_when_a_sample_is_missing() -> None:
    # The checker above must be able to fail: an epoch without sample 0 is not "each once".
    case = Case(size=5, batch_size=2, drop_last=False, sampler="random", seed=0)
    with pytest.raises(AssertionError):
        assert_follows_definition(case, [1, 2, 3, 4, 4])


# ---------------------------------------------------------------------------------------------
# Reproducibility: a seeded generator and worker_init_fn.


def augmented_epochs(
    size: int, batch_size: int, num_workers: int, seed: int, process_seed: int
) -> tuple[list[int], dict[int, list[torch.Tensor]]]:
    """Two shuffled epochs: the order, and each index's augmented samples. ``process_seed``
    seeds this process's RNGs first (with no workers they augment the samples)."""
    seed_this_process(process_seed)
    loader = DataLoader(
        AugmentedDataset(size),
        batch_size=batch_size,
        shuffle=True,
        num_workers=num_workers,
        worker_init_fn=seed_worker,
        generator=torch.Generator().manual_seed(seed),
    )
    order: list[int] = []
    samples: dict[int, list[torch.Tensor]] = {}
    for _ in range(2):
        for images, indices in loader:
            for image, index in zip(images, indices.tolist()):
                order.append(index)
                samples.setdefault(index, []).append(image)
    return order, samples


def same_samples(a: dict[int, list[torch.Tensor]], b: dict[int, list[torch.Tensor]]) -> bool:
    return a.keys() == b.keys() and all(
        torch.equal(x, y) for index in a for x, y in zip(a[index], b[index])
    )


def test_seeded_generator_and_worker_init_fn_repeat_order_and_augmentations(
    num_workers: int,
) -> None:
    @examples(num_workers, with_workers=4)  # 6 epochs each
    @given(size=st.integers(1, 40), batch_size=st.integers(1, 8), seed=st.integers(0, 2**31))
    def check(size: int, batch_size: int, seed: int) -> None:
        # As PyTorch's reproducibility notes say: seed torch (and numpy, random), the
        # loader's generator, and every worker through worker_init_fn.
        first = augmented_epochs(size, batch_size, num_workers, seed, process_seed=seed)
        again = augmented_epochs(size, batch_size, num_workers, seed, process_seed=seed)
        assert again[0] == first[0], "the order changed"
        assert same_samples(again[1], first[1]), "the augmentations changed"
        other = augmented_epochs(size, batch_size, num_workers, seed + 1, process_seed=seed + 1)
        assert not same_samples(other[1], first[1]), "another seed, the same augmentations"
        if size >= 10:  # two equal pairs of 10-sample shuffles: odds of 1 in 10!**2
            assert other[0] != first[0], "another seed, the same order"

    check()


def test_worker_augmentations_follow_the_generator_not_this_process(num_workers: int) -> None:
    # torch seeds worker k with the generator's base seed + k, whatever this process's RNG
    # state; without workers the samples are augmented here, from this process's RNGs.
    seed = 7
    one = augmented_epochs(24, 4, num_workers, seed, process_seed=1)
    two = augmented_epochs(24, 4, num_workers, seed, process_seed=2)
    assert two[0] == one[0]  # the order comes from the generator either way
    if num_workers:
        assert same_samples(two[1], one[1])
    else:
        assert not same_samples(two[1], one[1])


# ---------------------------------------------------------------------------------------------
# pin_memory, persistent_workers, prefetch_factor.


@pytest.mark.device("cuda")  # pinned (page-locked) memory is for copies to an accelerator
def test_pin_memory_yields_pinned_batches(device: torch.device, num_workers: int) -> None:
    batches: dict[bool, list[Any]] = {}
    for pin in (True, False):
        loader = DataLoader(IndexDataset(20), batch_size=4, num_workers=num_workers, pin_memory=pin)
        batches[pin] = list(loader)
    for x, indices in batches[True]:
        assert x.is_pinned()
        assert indices.is_pinned()
        on_device = x.to(device, non_blocking=True)  # allowed to overlap: the source is pinned
        torch.testing.assert_close(on_device.cpu(), features(indices).reshape(-1, FEATURES))
    for x, indices in batches[False]:
        assert not x.is_pinned()
        assert not indices.is_pinned()


WORKERS = 2  # behaviour that exists only with workers is checked with a fixed count


@pytest.mark.parametrize("persistent", [True, False], ids=["persistent", "not-persistent"])
def test_persistent_workers_keep_their_processes_across_epochs(persistent: bool) -> None:
    # 8 single-sample batches go round-robin to the workers: each loads 4 per epoch.
    loader = DataLoader(
        WhoLoads(8), batch_size=1, num_workers=WORKERS, persistent_workers=persistent
    )
    try:
        epochs = [loaded(list(loader)) for _ in range(3)]
    finally:
        shut_down(loader)
    pids = [{sample.pid for sample in epoch} for epoch in epochs]
    assert all(len(p) == WORKERS and os.getpid() not in p for p in pids), pids
    calls = [sorted(sample.calls for sample in epoch) for epoch in epochs]
    if persistent:
        assert pids[0] == pids[1] == pids[2]
        # The workers' copies of the dataset live on: their counters go on counting.
        assert calls == [
            [c for c in range(4 * e + 1, 4 * e + 5) for _ in range(WORKERS)] for e in range(3)
        ]
    else:
        assert len(pids[0] | pids[1] | pids[2]) == 3 * WORKERS, pids  # no process twice
        assert calls[0] == calls[1] == calls[2]  # fresh copies every epoch


@pytest.mark.parametrize("option", [{"prefetch_factor": 2}, {"persistent_workers": True}])
def test_worker_options_without_workers_are_value_errors(option: dict[str, Any]) -> None:
    # torch 2.14: "prefetch_factor option could only be specified in multiprocessing. let
    # num_workers > 0 ..." and "persistent_workers option needs num_workers > 0".
    with pytest.raises(ValueError, match=rf"{next(iter(option))} option .*(multiprocessing|> 0)"):
        DataLoader(IndexDataset(4), num_workers=0, **option)


def wait_for(condition: Callable[[], bool], seconds: float = 10.0) -> bool:
    """Poll ``condition`` until it holds or ``seconds`` pass."""
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.002)
    return True


@pytest.mark.parametrize(("workers", "prefetch_factor"), [(1, 1), (2, 2), (2, 3)])
def test_prefetch_keeps_workers_times_factor_batches_ahead(
    workers: int, prefetch_factor: int
) -> None:
    # Documented: prefetch_factor batches are loaded in advance by each worker, so
    # workers * prefetch_factor in all. Batches of one sample: "started" counts batches.
    size, ahead = 30, workers * prefetch_factor
    started = torch.zeros(size, dtype=torch.int64).share_memory_()
    loader = DataLoader(
        WhoLoads(size, started=started),
        batch_size=1,
        num_workers=workers,
        prefetch_factor=prefetch_factor,
    )
    iterator = iter(loader)
    try:
        for consumed in range(size + 1):
            if consumed:
                next(iterator)
            expected = min(size, consumed + ahead)
            # The workers get there (they load ahead unasked) ...
            assert wait_for(lambda e=expected: int(started.sum()) >= e), (
                f"{int(started.sum())} batches loaded after {consumed} were used, "
                f"expected {expected}"
            )
            # ... and no further, even given time.
            if consumed % 5 == 0:
                wait_for(lambda: False, seconds=0.02)
            assert int(started.sum()) == expected, (consumed, int(started.sum()))
    finally:
        shut_down(iterator)


# ---------------------------------------------------------------------------------------------
# Failures: a sample that raises, a worker that dies.


@pytest.mark.parametrize(("bad", "batch_size"), [(0, 1), (13, 4), (6, 3)])
def test_a_failing_sample_names_its_worker_and_index(bad: int, batch_size: int) -> None:
    loader = DataLoader(Corrupt(20, bad=bad), batch_size=batch_size, num_workers=WORKERS)
    iterator, delivered = iter(loader), []
    try:
        with pytest.raises(ValueError, match="Caught ValueError in DataLoader worker") as error:
            delivered.extend(iterator)  # keeps the batches that came before the error
    finally:
        shut_down(iterator)
    message = str(error.value)
    ours = re.search(r"sample (\d+) is corrupt \(read by worker (\d+)\)", message)
    assert ours, message  # the dataset's own message, with the index, comes through
    assert int(ours[1]) == bad
    assert f"Caught ValueError in DataLoader worker process {ours[2]}." in message
    assert "Original Traceback" in message
    assert "__getitem__" in message  # where it failed
    assert len(delivered) == bad // batch_size  # every batch before the bad one arrived


def test_a_failing_sample_without_workers_raises_the_datasets_own_error() -> None:
    loader = DataLoader(Corrupt(20, bad=13), batch_size=4)
    with pytest.raises(ValueError, match=r"^sample 13 is corrupt \(read by the main process\)$"):
        list(loader)


# A batch that takes longer than this is an error rather than a wait: a bug that lost the dead
# worker's batches fails here instead of hanging the session.
LOADER_TIMEOUT = 20


def error_chain(error: BaseException | None) -> Iterator[BaseException]:
    while error is not None:
        yield error
        error = error.__cause__ or error.__context__


def test_a_worker_killed_from_outside_is_reported_not_waited_for() -> None:
    # Samples as plain ints, batches as lists: a batch of tensors travels in shared memory
    # whose file descriptor the main process then fetches from the worker over a socket, and
    # a worker killed during that fetch is reported as a bare ConnectionResetError instead
    # (torch 2.14; seen in 2 of 6 runs). The kill itself is what this test is about.
    loader = DataLoader(
        WhoLoads(400, delay=0.005, plain=True),
        batch_size=1,
        num_workers=WORKERS,
        collate_fn=list,
        timeout=LOADER_TIMEOUT,
    )
    iterator = iter(loader)
    try:
        victim = loaded([next(iterator)])[0].pid
        os.kill(victim, signal.SIGKILL)
        with pytest.raises(RuntimeError) as error:
            list(iterator)
    finally:
        shut_down(iterator)
    messages = [str(e) for e in error_chain(error.value)]
    # torch 2.14: "DataLoader worker (pid(s) N) exited unexpectedly", raised from its SIGCHLD
    # handler's "DataLoader worker (pid N) is killed by signal: Killed."
    named = rf"DataLoader worker \(pid(\(s\))? {victim}\) (exited unexpectedly|is killed by signal)"
    assert any(re.search(named, m) for m in messages), messages
    assert not any("timed out" in m for m in messages), messages


# ---------------------------------------------------------------------------------------------
# Benchmarks. Each measures whole epochs over small datasets; persistent workers are started
# by the benchmark's first call, which is reported apart from the rounds, and warmed up by its
# warm-up, so what is timed is an epoch of loading (and, with workers, of batches crossing
# between processes), not process start-up. Every call checks that its epoch lost no sample.
# Every epoch runs this process with one thread, as each worker has: N processes of one thread
# against one. (With torch's 2 threads, the augmentations in this process took ~10x longer on
# the loaded 2-core VM: OpenMP threads waiting on each other, not loading.)

# Processes on 2 shared cores: wider margins than the 6% default, as in test_distributed.py.
# A worker speed-up measures the cores free at the time: in sessions minutes apart on the
# shared VM, 2 workers decoding images gave 0.94x to 1.74x, 8 workers waiting on latency 2.9x
# to 4.8x. Record and compare on an idle runner; a lost worker pool (1.7x falling to 1x) or
# lost packing (45x to 1x) still shows.
TIME_THRESHOLD = 0.3
SPEEDUP_TOLERANCE = 0.4
BATCH = 32
AUGMENTED = 128  # pictures an epoch of the augmentation benchmark loads
TALK = "MXNet talk: more DataLoader workers, one GPU: 306 -> 663 samples/s"
BOOK = (
    "book ch. 5: DenseNet121, CIFAR-10, A100, batch 128, 10 epochs: 1,892 s with the default "
    "loader, 846 s with pin_memory=True, num_workers=8"
)
LECTURE = (
    "lecture: video loading with 8 workers, the ideal 8x; measured far less "
    "(16.15 s ideal per step vs 4.84 s overhead)"
)


@pytest.fixture(scope="module")
def pictures(tmp_path_factory: pytest.TempPathFactory) -> Pictures:
    return write_pictures(tmp_path_factory.mktemp("pictures"))


def worker_counts(config: pytest.Config, *counts: int) -> list[int]:
    """``counts`` and the counts ``--hpml-loader-workers`` selects."""
    return sorted({*counts, *hpml_settings(config).loader_workers})


def one_thread_epoch(
    name: str, loader: DataLoader, samples: int, device: torch.device | None = None
) -> Callable[[], int]:
    """One epoch over ``loader`` (to ``device``, asynchronously from pinned batches), with this
    process on one thread; fails unless it yielded ``samples``, and returns them."""

    def epoch() -> int:
        seen = 0
        with threads(1):
            for x, _ in loader:
                if device is not None:
                    x = x.to(device, non_blocking=loader.pin_memory)
                seen += len(x)
        assert seen == samples, f"{name}: an epoch yielded {seen} of its {samples} samples"
        return seen

    return epoch


def measure_loaders(
    benchmark: Any,
    loaders: dict[str, DataLoader],
    baseline: str,
    epoch_samples: int,
    device: torch.device | None = None,
) -> dict[str, Any]:
    """Measure the loaders' epochs as variants (the first call starts persistent workers),
    with samples/s of each; stops the workers whatever happens."""
    try:
        epochs = {
            name: one_thread_epoch(name, loader, epoch_samples, device)
            for name, loader in loaders.items()
        }
        # An epoch per call: throughput[name] in samples/s, judged like the times.
        benchmark.track(batch_size=epoch_samples)
        # workers load while this process trains: judged where the host left them their cores
        cores = {name: loader.num_workers + 1 for name, loader in loaders.items()}
        return benchmark.variants(
            epochs, baseline=baseline, tolerance=SPEEDUP_TOLERANCE, cores=cores
        )
    finally:
        for loader in loaders.values():
            shut_down(loader)


def reusable_loader(dataset: Any, workers: int, batch_size: int, pin: bool = False) -> DataLoader:
    """A loader whose workers, if any, persist across epochs."""
    return DataLoader(
        dataset,
        batch_size=batch_size,
        num_workers=workers,
        persistent_workers=workers > 0,
        pin_memory=pin,
    )


@pytest.mark.hpml_bench(threshold=TIME_THRESHOLD)
def test_image_files_through_the_book_augmentations_by_worker_count(
    benchmark: Any, pictures: Pictures, device: torch.device, request: pytest.FixtureRequest
) -> None:
    # Timed: an epoch of 128 JPEGs decoded with Pillow and augmented, in batches of 16 (on CUDA
    # pinned and copied to the GPU, as the book's loader did): a batch for each of the book's 8
    # workers. (All 256 in batches of 32 cost each process of a comparison twice as long: the
    # slowest benchmark of the suites, whose pairs --hpml-against ran to their cap.)
    pin = device.type == "cuda"
    images = Subset(ImageFiles(pictures, BOOK_TRANSFORMS), range(AUGMENTED))
    loaders = {
        f"workers{n}": reusable_loader(images, n, AUGMENTED // 8, pin)
        for n in worker_counts(request.config, 0, 2, 8)
    }
    measure_loaders(benchmark, loaders, "workers0", AUGMENTED, device=device)
    if not benchmark.disabled:
        benchmark.cite("speedup[workers2/workers0]", round(663 / 306, 2), TALK)
        benchmark.cite("speedup[workers8/workers0]", round(1892 / 846, 2), BOOK)


def test_packed_pixels_are_the_decoded_files(pictures: Pictures) -> None:
    # The packed benchmark below compares the same data: pixels equal to decoding each file.
    files, jpeg, pixels = ImageFiles(pictures), PackedJpeg(pictures), PackedPixels(pictures)
    assert len(files) == len(jpeg) == len(pixels) == len(pictures)
    for index in (0, 1, len(pictures) // 2, len(pictures) - 1):
        from_file = files[index][0]
        assert from_file.shape == (3, 64, 64)
        assert from_file.dtype == torch.uint8
        assert torch.equal(jpeg[index][0], from_file)
        assert torch.equal(pixels[index][0], from_file)


@pytest.mark.hpml_bench(threshold=TIME_THRESHOLD)
def test_one_packed_file_against_many_small_files(benchmark: Any, pictures: Pictures) -> None:
    # Timed: an epoch of the 256 images as uint8 batches, in this process (no augmentation:
    # what differs is storage). "packed_jpeg" keeps the encoding, as RecordIO does, so its
    # gain is the per-file open/read alone; "packed_pixels" also skips decoding. The files were
    # just written, so they are in the page cache: no disk latency, only system calls.
    loaders = {
        "files": reusable_loader(ImageFiles(pictures), 0, BATCH),
        "packed_jpeg": reusable_loader(PackedJpeg(pictures), 0, BATCH),
        "packed_pixels": reusable_loader(PackedPixels(pictures), 0, BATCH),
    }
    measure_loaders(benchmark, loaders, "files", len(pictures))


LATENCY = 0.002  # seconds per sample: a slow disk or object store, spent waiting


@pytest.mark.hpml_bench(threshold=TIME_THRESHOLD)
def test_latency_bound_loading_gains_from_more_workers_than_cores(
    benchmark: Any, request: pytest.FixtureRequest
) -> None:
    # Timed: an epoch of 64 samples of 2 ms latency each, in batches of 4 (128 ms in one
    # process). Waiting takes no core, so 4 and 8 workers on 2 cores keep more requests
    # outstanding and should beat 2.
    counts = worker_counts(request.config, 0, 2, 4, 8)
    loaders = {f"workers{n}": reusable_loader(Latency(64, LATENCY), n, 4) for n in counts}
    measure_loaders(benchmark, loaders, "workers0", 64)
    if not benchmark.disabled:
        benchmark.cite("speedup[workers8/workers0]", 8.0, LECTURE)
