"""Atomic file output: a reader never sees half a file, a crash never leaves one.

Every writer in the package goes through :func:`atomic_path`: content is written
to a temporary sibling and renamed over the target only once complete.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

__all__ = ["atomic_path", "save_figure", "sha256_file", "write_json", "write_text"]


_UMASK = os.umask(0)
os.umask(_UMASK)


@contextlib.contextmanager
def atomic_path(target: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temporary path beside ``target``; rename it onto ``target`` on success.

    The temporary name keeps the target's suffix so format-sniffing writers
    (matplotlib's ``savefig``, pandas) pick the right format.
    """
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=f".tmp{target.suffix}", dir=target.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        yield tmp
        os.chmod(tmp, 0o666 & ~_UMASK)  # mkstemp creates 0600; give the file the permissions open() would
        os.replace(tmp, target)
    finally:
        if tmp.exists():
            tmp.unlink()


def write_text(target: str | os.PathLike[str], text: str) -> None:
    with atomic_path(target) as tmp:
        tmp.write_text(text, encoding="utf-8")


def write_json(target: str | os.PathLike[str], payload: Any) -> None:
    write_text(target, json.dumps(payload, indent=2, sort_keys=True, allow_nan=False) + "\n")


def sha256_file(path: str | os.PathLike[str], chunk_size: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(chunk_size):
            digest.update(chunk)
    return digest.hexdigest()


def save_figure(fig: Any, *paths: str | os.PathLike[str], dpi: int = 150) -> None:
    """Save a matplotlib figure to each path (format from the suffix) atomically, then close it."""
    import matplotlib.pyplot as plt

    for path in paths:
        with atomic_path(path) as tmp:
            fig.savefig(tmp, dpi=dpi, bbox_inches="tight")
    plt.close(fig)
