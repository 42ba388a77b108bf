"""Datasets, a sampler and image files for ``test_dataloader.py``: small map-style datasets that
say which process loaded each sample and when, the book's augmentation pipeline, and a few
hundred real JPEG files with the same pixels packed into single files.

Every dataset here is cheap to copy into a worker (fork) and keeps no open file between samples,
so loaders over them leave nothing behind when their workers stop.
"""

from __future__ import annotations

import io
import os
import random
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch
from PIL import Image
from torch.utils.data import DataLoader, Dataset, Sampler, get_worker_info
from torchvision.transforms import v2

FEATURES = 3  # features per sample of IndexDataset
CLASSES = 10


def features(index: torch.Tensor | int) -> torch.Tensor:
    """Sample ``index``'s features (index 5: 50, 51, 52): a batch shows whether each row came
    with its own index. Exact in float32 for every index used here."""
    column = torch.as_tensor(index, dtype=torch.float32).reshape(-1, 1)
    return (10.0 * column + torch.arange(FEATURES, dtype=torch.float32)).squeeze(0)


class IndexDataset(Dataset):
    """Sample ``i`` is ``(features(i), i)``."""

    def __init__(self, size: int) -> None:
        self.size = size

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        return features(index), index


class StridedSampler(Sampler[int]):
    """A custom sampler: every ``stride``-th index, then the same shifted by one, and so on (the
    order in which ``stride`` interleaved shards would be read): every index once."""

    def __init__(self, size: int, stride: int) -> None:
        self.size, self.stride = size, stride

    def __len__(self) -> int:
        return self.size

    def __iter__(self) -> Iterator[int]:
        for start in range(self.stride):
            yield from range(start, self.size, self.stride)


class AugmentedDataset(Dataset):
    """Sample ``i``: a fixed 1x4x4 "image" randomly flipped, scaled, shifted and noised, drawing
    from torch's, numpy's and Python's RNGs of the process that loads it (a worker; with no
    workers, the main process), as training pipelines do."""

    def __init__(self, size: int) -> None:
        self.size = size

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        image = torch.arange(16.0).reshape(1, 4, 4) + index
        if torch.rand(()) < 0.5:
            image = image.flip(-1)
        image = image * float(np.random.uniform(0.8, 1.2)) + random.gauss(0.0, 1.0)
        return image + 0.1 * torch.randn_like(image), index


def seed_worker(worker_id: int) -> None:
    """PyTorch's reproducibility recipe for ``worker_init_fn``: seed numpy and ``random`` from
    the seed torch gave this worker (the loader generator's base seed + the worker id)."""
    worker_seed = torch.initial_seed() % 2**32
    np.random.seed(worker_seed)
    random.seed(worker_seed)


def seed_this_process(seed: int) -> None:
    torch.manual_seed(seed)
    np.random.seed(seed)
    random.seed(seed)


@dataclass(frozen=True)
class Loaded:
    """Who loaded a sample: the process, the worker id (-1 in the main process) and how many
    samples that copy of the dataset had loaded, this one included."""

    index: int
    pid: int
    worker: int
    calls: int


class WhoLoads(Dataset):
    """Sample ``i`` is a :class:`Loaded`, as a 4-element tensor (``plain``: a tuple of ints),
    after ``delay`` seconds. ``calls`` counts in the dataset copy that loads it: a worker's copy
    lives as long as the worker. ``started``, a tensor in shared memory (seen by forked
    workers), gets a 1 at each index whose loading has begun."""

    def __init__(
        self,
        size: int,
        delay: float = 0.0,
        started: torch.Tensor | None = None,
        plain: bool = False,
    ) -> None:
        self.size, self.delay, self.started, self.plain = size, delay, started, plain
        self.calls = 0

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> torch.Tensor | tuple[int, int, int, int]:
        if self.started is not None:
            self.started[index] = 1  # one writer per index: no lost updates between workers
        self.calls += 1
        if self.delay:
            time.sleep(self.delay)
        info = get_worker_info()
        sample = (index, os.getpid(), -1 if info is None else info.id, self.calls)
        return sample if self.plain else torch.tensor(sample)


def loaded(batches: Sequence[Any]) -> list[Loaded]:
    """The samples of batches of :class:`WhoLoads` (collated tensors, or lists of tuples)."""
    rows = [batch.tolist() if isinstance(batch, torch.Tensor) else batch for batch in batches]
    return [Loaded(*row) for batch in rows for row in batch]


class Corrupt(IndexDataset):
    """An :class:`IndexDataset` whose sample ``bad`` cannot be read: its error names the index
    and the worker that tried."""

    def __init__(self, size: int, bad: int) -> None:
        super().__init__(size)
        self.bad = bad

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        if index == self.bad:
            info = get_worker_info()
            worker = "the main process" if info is None else f"worker {info.id}"
            raise ValueError(f"sample {index} is corrupt (read by {worker})")
        return super().__getitem__(index)


class Latency(Dataset):
    """Each sample takes ``latency`` seconds of waiting, not computing: storage or network
    latency, where the lecture's IOPS argument says more outstanding requests help."""

    def __init__(self, size: int, latency: float) -> None:
        self.size, self.latency = size, latency

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        time.sleep(self.latency)
        return torch.full((16,), float(index)), index


def shut_down(loader_or_iterator: DataLoader | Iterator[Any]) -> None:
    """Stop the worker processes of a loader's persistent iterator, or of an iterator, now.

    torch stops them when an epoch ends or when the iterator is collected; an exception's
    traceback (or a persistent loader still referenced) keeps them running until then, and
    torch has no public close, so this calls what ``__del__`` calls.
    """
    iterator = getattr(loader_or_iterator, "_iterator", loader_or_iterator)
    stop = getattr(iterator, "_shutdown_workers", None)
    if stop is None:
        return
    try:
        stop()
    except RuntimeError as error:
        # A worker killed on purpose, not yet reaped, is reported again by torch's SIGCHLD
        # handler when another worker exits while stop() joins them; stop()'s own cleanup
        # (unregister, terminate, join) still runs, in its finally block.
        if "is killed by signal" not in str(error):
            raise


# The book's ch. 5 augmentations, for 64x64 images: resize, crop, flip, rotation, blur, then
# float and normalize (ImageNet's statistics).
BOOK_TRANSFORMS = v2.Compose(
    [
        v2.PILToTensor(),
        v2.Resize(72, antialias=True),
        v2.RandomCrop(64),
        v2.RandomHorizontalFlip(),
        v2.RandomRotation(15),
        v2.GaussianBlur(3),
        v2.ToDtype(torch.float32, scale=True),
        v2.Normalize(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225]),
    ]
)
PIXELS = v2.PILToTensor()  # no augmentation: the stored uint8 pixels


@dataclass(frozen=True)
class Pictures:
    """``count`` JPEG files, and the same images packed two ways: every JPEG's bytes end to end
    in one file (RecordIO's idea: one file, still encoded; ``offsets[i]:offsets[i+1]`` is image
    ``i``), and their decoded pixels as one uint8 tensor (N, 3, H, W)."""

    paths: tuple[Path, ...]
    packed_jpeg: Path
    offsets: tuple[int, ...]
    packed_pixels: Path

    def __len__(self) -> int:
        return len(self.paths)


def write_pictures(directory: Path, count: int = 256, size: int = 64, seed: int = 0) -> Pictures:
    """Photo-like JPEGs (smooth colour fields with grain, quality 90, ~2.6 kB each at 64x64),
    written under ``directory``, and the two packed files."""
    rng = np.random.default_rng(seed)
    paths, blobs, pixels = [], [], []
    for i in range(count):
        coarse = Image.fromarray(rng.integers(0, 256, (8, 8, 3), dtype=np.uint8))
        smooth = np.asarray(coarse.resize((size, size), Image.BILINEAR), dtype=np.int16)
        grain = rng.integers(-20, 21, smooth.shape, dtype=np.int16)
        image = Image.fromarray((smooth + grain).clip(0, 255).astype(np.uint8))
        path = directory / f"{i:04d}.jpg"
        image.save(path, format="JPEG", quality=90)
        paths.append(path)
        blobs.append(path.read_bytes())
        with Image.open(path) as stored:  # what decoding the file gives, not the array above
            pixels.append(PIXELS(stored.convert("RGB")))
    packed_jpeg = directory / "images.jpegs"
    packed_jpeg.write_bytes(b"".join(blobs))
    offsets = np.cumsum([0] + [len(b) for b in blobs]).tolist()
    packed_pixels = directory / "pixels.pt"
    torch.save(torch.stack(pixels), packed_pixels)
    return Pictures(tuple(paths), packed_jpeg, tuple(offsets), packed_pixels)


def _decode(source: str | Path | io.BytesIO, transform: Callable[[Any], Any]) -> Any:
    with Image.open(source) as image:
        return transform(image.convert("RGB"))


class ImageFiles(Dataset):
    """One file per sample, decoded with Pillow: the many-small-files layout."""

    def __init__(self, pictures: Pictures, transform: Callable[[Any], Any] = PIXELS) -> None:
        self.paths, self.transform = pictures.paths, transform

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        return _decode(self.paths[index], self.transform), index % CLASSES


class PackedJpeg(Dataset):
    """The JPEG bytes of every sample in one memory-mapped file, decoded with Pillow."""

    def __init__(self, pictures: Pictures, transform: Callable[[Any], Any] = PIXELS) -> None:
        self.blob = np.memmap(pictures.packed_jpeg, dtype=np.uint8, mode="r")
        self.offsets, self.transform = pictures.offsets, transform

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        start, end = self.offsets[index], self.offsets[index + 1]
        return _decode(io.BytesIO(self.blob[start:end].tobytes()), self.transform), index % CLASSES


class PackedPixels(Dataset):
    """Every sample's decoded pixels in one uint8 tensor, memory-mapped by ``torch.load``."""

    def __init__(self, pictures: Pictures) -> None:
        self.pixels = torch.load(pictures.packed_pixels, mmap=True, weights_only=True)

    def __len__(self) -> int:
        return len(self.pixels)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        return self.pixels[index], index % CLASSES
