"""A hub snapshot downloaded into ``HF_HOME`` and nowhere else, whatever the endpoint answers (issue 60, item 4).

``huggingface_hub`` turns what the endpoint states into paths unchecked: the commit sha becomes
``snapshots/<sha>``, the ETag becomes ``blobs/<etag>``, so a hostile ``HF_ENDPOINT`` answering ``../../..`` put the
bytes ten folders up, and it writes a body whole before comparing it with the stated size. Here every commit sha
(40 lowercase hex, ``huggingface_hub``'s own ``REGEX_COMMIT_HASH``) and every ETag (40 hex: a git blob id; 64 hex: an
LFS sha256, the two forms the Hub's cache layout names blobs by) is checked before it becomes a path, every path is
resolved inside ``HF_HOME`` before anything is written to it, and a body is counted while it streams and dropped
the moment it passes the size the tree stated (a temporary file renamed into place, so nothing half-written stays).

The layout is ``huggingface_hub``'s (``<repo>/blobs/<etag>``, ``<repo>/snapshots/<sha>/<path>`` a relative symlink
to the blob, ``<repo>/refs/<revision>`` holding the sha), so offline jobs read it with ``huggingface_hub`` as before.
:func:`confined_writes` guards the code this module does not own (``datasets`` preparing a dataset online) with an
audit hook: a write, rename, link or directory outside the allowed root is refused and reported.
"""

from __future__ import annotations

import errno
import os
import re
import sys
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

__all__ = ["COMMIT_SHA", "ETAG", "ConfinementError", "check_commit", "check_etag", "confined_writes",
           "download_snapshot", "inside"]

#: A commit as ``huggingface_hub`` recognises one (``file_download.REGEX_COMMIT_HASH``): it names ``snapshots/<sha>``.
COMMIT_SHA = re.compile(r"[0-9a-f]{40}")
#: A blob name of the cache layout: the Hub's ETag is a git blob id (40 hex) or, for LFS files, the sha256 (64 hex).
ETAG = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")
CHUNK = 1 << 20
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC


class ConfinementError(RuntimeError):
    """A hub answer that would put a file outside ``HF_HOME``, name a path with something that is not a sha or an
    ETag, or send more bytes than it stated."""


def inside(path: str | os.PathLike[str], root: str | os.PathLike[str]) -> bool:
    """Whether ``path``, with every symlink and ``..`` resolved, is ``root`` or below it."""
    return Path(os.path.realpath(path)).is_relative_to(os.path.realpath(root))


def _require_inside(path: Path, root: Path, what: str) -> Path:
    if not inside(path, root):
        raise ConfinementError(f"{what} would write {path} (resolved: {os.path.realpath(path)}), which is outside "
                               f"HF_HOME {root}; refused")
    return path


def check_commit(value: object, where: str) -> str:
    """``value`` when it is a commit sha (40 lowercase hex); a :class:`ConfinementError` naming ``where`` otherwise."""
    if not isinstance(value, str) or not COMMIT_SHA.fullmatch(value):
        raise ConfinementError(f"{where}: the hub stated commit {value!r:.120}, not a 40-hex sha; refused before it "
                               "became a path")
    return value


def check_etag(header: str | None, where: str) -> str:
    """The blob name of an ETag header (``W/"..."`` and quotes dropped as ``huggingface_hub`` does) when it is a git
    blob id or a sha256; a :class:`ConfinementError` otherwise (``../``, separators, NUL, anything else)."""
    value = header.removeprefix("W/").strip('"') if isinstance(header, str) else header
    if not isinstance(value, str) or not ETAG.fullmatch(value):
        raise ConfinementError(f"{where}: the hub stated ETag {header!r:.120}, not a 40- or 64-hex blob id; refused "
                               "before it became a path")
    return value


def _check_relative(name: object, where: str) -> str:
    """A repository file name that stays a relative path: no absolute path, ``..``, backslash, NUL or empty part."""
    parts = name.split("/") if isinstance(name, str) else [""]
    if "\\" in str(name) or "\0" in str(name) or any(part in ("", ".", "..") for part in parts):
        raise ConfinementError(f"{where}: the hub listed the file name {name!r:.200}, which is not a plain relative "
                               "path; refused")
    return str(name)


def _check_revision(revision: str, where: str) -> str:
    """A branch or tag name that stays below ``refs/`` (``main``, ``v1.0``, ``refs/pr/1``)."""
    return _check_relative(revision, f"{where} (revision)")


def _stated_size(response: Any, listed: int, where: str) -> None:
    """Refuse a response whose own headers state a size other than the tree's, before reading its body."""
    for header in ("X-Linked-Size", "Content-Length"):
        stated = response.headers.get(header)
        if stated is not None and response.headers.get("Content-Encoding", "identity") == "identity":
            if not stated.isdigit() or int(stated) != listed:
                raise ConfinementError(f"{where}: {header} {stated!r:.40} but the tree states {listed} bytes; refused")
            return


def _stream_to(response: Any, blob: Path, size: int, where: str) -> None:
    """The body into ``blob`` through a temporary file beside it; stops as soon as more than ``size`` bytes arrive,
    or fails when fewer did, removing the temporary file either way."""
    handle, temporary = tempfile.mkstemp(dir=blob.parent, prefix=f".{blob.name}.", suffix=".incomplete")
    try:
        received = 0
        with os.fdopen(handle, "wb") as out:
            for chunk in response.iter_bytes(CHUNK):
                received += len(chunk)
                if received > size:
                    raise ConfinementError(f"{where}: more than the stated {size} bytes arrived; stopped at "
                                           f"{received} and nothing was kept")
                out.write(chunk)
        if received != size:
            raise ConfinementError(f"{where}: {received} bytes arrived, the tree states {size}; nothing was kept")
        os.replace(temporary, blob)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def _link(pointer: Path, blob: Path) -> None:
    """``pointer`` a relative symlink to ``blob`` (the cache layout), replaced atomically if it exists."""
    temporary = pointer.with_name(f".{pointer.name}.{os.getpid()}.link")
    temporary.unlink(missing_ok=True)
    os.symlink(os.path.relpath(blob, pointer.parent), temporary)
    os.replace(temporary, pointer)


def _write_ref(ref: Path, commit: str) -> None:
    ref.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=ref.parent, prefix=f".{ref.name}.", suffix=".tmp")
    with os.fdopen(handle, "w") as out:
        out.write(commit)
    os.replace(temporary, ref)


def download_snapshot(api: Any, repo_type: str, repo_id: str, revision: str | None, hf_home: str | os.PathLike[str],
                      token: str | None, endpoint: str | None, ref: str | None = None) -> Path:
    """Download one repository's files at ``revision`` into ``<hf_home>/hub`` in ``huggingface_hub``'s layout and
    return its snapshot folder; a :class:`ConfinementError` for any answer that would escape it or overrun a size.
    ``ref`` (default: ``revision`` or ``main``) is the name the cache points at the commit, which offline reads of
    that name resolve to (the hub lock's commit under the revision its config asks)."""
    from huggingface_hub import hf_hub_url
    from huggingface_hub.hf_api import RepoFile
    from huggingface_hub.utils import build_hf_headers, get_session, hf_raise_for_status

    root = Path(hf_home)
    where = f"{repo_type} {repo_id}"
    storage = _require_inside(root / "hub" / f"{repo_type}s--{repo_id.replace('/', '--')}", root, where)
    info = api.repo_info(repo_id, repo_type=repo_type, revision=revision, token=token or False)
    commit = check_commit(info.sha, where)
    entries = [entry for entry in api.list_repo_tree(repo_id, recursive=True, revision=commit, repo_type=repo_type,
                                                     token=token or False) if isinstance(entry, RepoFile)]
    snapshot = _require_inside(storage / "snapshots" / commit, root, where)
    headers = build_hf_headers(token=token or False) | {"Accept-Encoding": "identity"}
    for entry in entries:
        name = _check_relative(entry.path, where)
        size = entry.size
        if not isinstance(size, int) or size < 0:
            raise ConfinementError(f"{where}: the tree states size {size!r:.40} for {name!r}; refused")
        pointer = _require_inside(snapshot / name, root, f"{where} file {name!r}")
        if pointer.is_file() and pointer.stat().st_size == size:  # a commit never changes: already here
            continue
        url = hf_hub_url(repo_id, name, repo_type=repo_type, revision=commit, endpoint=endpoint)
        with get_session().stream("GET", url, headers=headers, follow_redirects=True, timeout=60) as response:
            if response.status_code >= 400:
                response.read()
                hf_raise_for_status(response)
            # the hub's own answer is the first of the chain: an LFS/Xet file's resolve is a redirect carrying its
            # commit, X-Linked-Etag and X-Linked-Size, and the storage it points to states its own ETag (an MD5)
            hub = response.history[0] if response.history else response
            if hub.headers.get("X-Repo-Commit") is not None:
                stated = check_commit(hub.headers["X-Repo-Commit"], f"{where} file {name!r}")
                if stated != commit:
                    raise ConfinementError(f"{where} file {name!r}: served from commit {stated}, asked {commit}")
            etag = check_etag(hub.headers.get("X-Linked-Etag") or hub.headers.get("ETag"), f"{where} file {name!r}")
            _stated_size(hub, size, f"{where} file {name!r}")
            if hub is not response:
                _stated_size(response, size, f"{where} file {name!r} (its storage)")
            blob = _require_inside(storage / "blobs" / etag, root, f"{where} file {name!r}")
            blob.parent.mkdir(parents=True, exist_ok=True)
            _stream_to(response, blob, size, f"{where} file {name!r}")
        pointer.parent.mkdir(parents=True, exist_ok=True)
        _link(pointer, blob)
        _require_inside(pointer, root, f"{where} file {name!r}")  # the link as written resolves inside too
    ref = ref or revision or "main"
    if ref != commit:
        _write_ref(_require_inside(storage / "refs" / _check_revision(ref, where), root, where), commit)
    snapshot.mkdir(parents=True, exist_ok=True)  # a repository with no files still has its (empty) snapshot
    return snapshot


# --- writes by code this module does not own -------------------------------------------------------------------------

_roots: list[str] = []
_refused: list[str] = []
_hooked = False
_busy = threading.local()


def _target(event: str, args: tuple[Any, ...]) -> list[Any]:
    """The paths an audited event writes to (empty for reads and for events that write nothing)."""
    if event == "open":
        path, _, flags = args
        writes = isinstance(flags, int) and flags & _WRITE_FLAGS and not isinstance(path, int)
        return [path] if writes and os.fsdecode(path) != os.devnull else []  # /dev/null: a sink, not a file
    if event in ("os.rename", "os.link"):
        return [args[1]]
    if event == "os.symlink":  # the link, and what it points at (relative to the link's folder)
        return [args[1], os.path.join(os.path.dirname(os.fsdecode(args[1])), os.fsdecode(args[0]))]
    if event in ("os.mkdir", "os.remove", "os.rmdir", "os.truncate", "shutil.rmtree"):
        return [args[0]] if not isinstance(args[0], int) else []
    return []


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if not _roots or getattr(_busy, "on", False):
        return
    _busy.on = True
    try:
        for path in _target(event, args):
            text = os.fsdecode(path)
            if not any(inside(text, root) for root in _roots):
                _refused.append(f"{event} {text}")
                raise PermissionError(errno.EACCES, f"fetch writes only inside {_roots[0]}; refused {event}", text)
    finally:
        _busy.on = False


@contextmanager
def confined_writes(root: str | os.PathLike[str]) -> Iterator[None]:
    """Within the block, any write of this process outside ``root`` (open for writing, rename, link, symlink, mkdir,
    remove) is refused before it happens, and the block ends in a :class:`ConfinementError` naming each refused path
    even when the code that tried caught the ``PermissionError``."""
    global _hooked
    if not _hooked:
        sys.addaudithook(_audit)  # cannot be removed: it does nothing while no block is open
        _hooked = True
    scratch = Path(root, "tmp")
    scratch.mkdir(parents=True, exist_ok=True)
    _roots.append(os.path.realpath(root))
    start, bytecode, temporary = len(_refused), sys.dont_write_bytecode, tempfile.tempdir
    sys.dont_write_bytecode = True  # a lazy import inside the block would otherwise write a .pyc outside the root
    tempfile.tempdir = str(scratch)  # libraries' temporary files (datasets') go inside the root too

    def refused() -> ConfinementError | None:
        _roots.pop()
        sys.dont_write_bytecode, tempfile.tempdir = bytecode, temporary
        paths = _refused[start:]
        del _refused[start:]
        return ConfinementError(f"refused {len(paths)} write(s) outside HF_HOME {root}: " + "; ".join(paths[:5])
                                ) if paths else None

    try:
        yield
    except BaseException as error:
        if (confinement := refused()) is not None:
            raise confinement from error
        raise
    if (confinement := refused()) is not None:
        raise confinement
