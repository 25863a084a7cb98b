"""Datasets for the objective study: ImageNet in ImageFolder layout, or a synthetic many-class problem.

The synthetic problem is built so initial success rates are low (1 / n_classes), the
regime the paper studies, and ships with the code, so the tiny default needs no download.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from torch.utils.data import Dataset, Sampler, TensorDataset

if TYPE_CHECKING:
    from pipeline_lib.core.run_spec import ImageNetDataset

__all__ = ["EpochSampler", "SplitData", "imagefolder_splits", "synthetic_splits", "validate_imagefolder"]


@dataclass
class SplitData:
    train: Dataset
    val: Dataset
    n_classes: int
    input_shape: tuple[int, ...]
    description: str


def synthetic_splits(n_classes: int, dim: int, n_train: int, n_val: int, noise: float, seed: int) -> SplitData:
    """Gaussian classes around random unit-norm means; ``noise`` sets how much they overlap."""
    gen = torch.Generator().manual_seed(seed)
    means = torch.nn.functional.normalize(torch.randn(n_classes, dim, generator=gen), dim=1)

    def draw(n: int) -> TensorDataset:
        labels = torch.randint(n_classes, (n,), generator=gen)
        features = means[labels] + noise * torch.randn(n, dim, generator=gen) / dim**0.5
        return TensorDataset(features, labels)

    return SplitData(draw(n_train), draw(n_val), n_classes, (dim,),
                     f"synthetic: {n_classes} Gaussian classes in {dim} dims, noise {noise}, seed {seed}")


def validate_imagefolder(root: str | os.PathLike[str], expected_classes: int | None) -> list[str]:
    """Check ``root/train`` and ``root/val`` hold the same class folders (and the expected count)."""
    root = Path(root)
    classes = {}
    for split in ("train", "val"):
        directory = root / split
        if not directory.is_dir():
            raise FileNotFoundError(f"ImageNet split folder {directory} does not exist (expected ImageFolder layout)")
        classes[split] = sorted(p.name for p in directory.iterdir() if p.is_dir())
        if not classes[split]:
            raise ValueError(f"{directory} has no class folders")
    if classes["train"] != classes["val"]:
        only_train = sorted(set(classes["train"]) - set(classes["val"]))[:5]
        only_val = sorted(set(classes["val"]) - set(classes["train"]))[:5]
        raise ValueError(f"{root}: train and val classes differ (only in train: {only_train}, only in val: {only_val})")
    if expected_classes is not None and len(classes["train"]) != expected_classes:
        raise ValueError(f"{root}: found {len(classes['train'])} classes, expected {expected_classes}")
    return classes["train"]


def imagefolder_splits(root: str, expected_classes: int | None, image_size: int = 224) -> SplitData:
    """Standard ImageNet transforms (random-resized crop + flip for train, resize + centre crop for val)."""
    from torchvision import datasets, transforms  # GPU environment only

    classes = validate_imagefolder(root, expected_classes)
    normalise = transforms.Normalize(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225])
    train = datasets.ImageFolder(os.path.join(root, "train"), transforms.Compose([
        transforms.RandomResizedCrop(image_size), transforms.RandomHorizontalFlip(), transforms.ToTensor(), normalise]))
    val = datasets.ImageFolder(os.path.join(root, "val"), transforms.Compose([
        transforms.Resize(int(image_size * 256 / 224)), transforms.CenterCrop(image_size), transforms.ToTensor(),
        normalise]))
    return SplitData(train, val, len(classes), (3, image_size, image_size), f"ImageFolder {root}")


class EpochSampler(Sampler[int]):
    """A permutation fixed by (seed, epoch), optionally starting part-way, so a resumed run sees the same data."""

    def __init__(self, size: int, seed: int) -> None:
        self.size, self.seed = size, seed
        self.epoch, self.start = 0, 0

    def set_position(self, epoch: int, start: int) -> None:
        self.epoch, self.start = epoch, start

    def __iter__(self) -> Iterator[int]:
        gen = torch.Generator().manual_seed(self.seed * 100_003 + self.epoch)
        yield from torch.randperm(self.size, generator=gen)[self.start:].tolist()

    def __len__(self) -> int:
        return self.size - self.start


def build_splits(dataset: ImageNetDataset) -> SplitData:
    """The study's train and validation splits, as its ``imagenet.dataset`` settings say. The run's seed does not
    enter: every seed trains on the same data (the synthetic problem's own ``imagenet.dataset.seed``)."""
    if dataset.kind == "synthetic":
        return synthetic_splits(dataset.n_classes, dataset.dim, dataset.n_train, dataset.n_val, dataset.noise,
                                dataset.seed)
    if dataset.kind == "imagefolder":
        if dataset.root is None:
            raise ValueError("imagenet.dataset.root is not set (the ImageFolder root holding train/ and val/)")
        return imagefolder_splits(dataset.root, dataset.expected_classes)
    raise ValueError(f"unknown dataset kind {dataset.kind!r}")
