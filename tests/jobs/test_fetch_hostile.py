"""`fetch` against a hostile hub on 127.0.0.1 (issue 60, item 4): a commit sha or ETag that is a path, a file name
with ``..``, a body longer than its stated size (or endless), a commit stated on ``HEAD`` only. Each fails with an
error naming what the hub stated, and nothing is written outside ``HF_HOME``; the cases are rows of
docs/hostile_cases.md."""

from __future__ import annotations

import contextlib
import hashlib
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pipeline_lib.jobs.fetch import FetchError, fetch
from pipeline_lib.jobs.hub_download import ConfinementError, check_commit, check_etag, confined_writes
from pipeline_lib.plan.hub import HubRepo, repos_json
from tests.conftest import repo_env
from tests.hub_server import HubServer, Repo

MODEL = HubRepo("model", "org/tiny-model", why="train.verl.model")
FILES = {"config.json": b'{"model_type": "qwen2"}', "model.safetensors": b"\1" * 64}
UP = "../" * 10 + "escaped"


def _home(tmp_path: Path) -> Path:
    """An ``HF_HOME`` ten folders below ``tmp_path``, so ten ``../`` land in ``tmp_path`` (seen by :func:`_outside`)."""
    return tmp_path.joinpath(*"abcdefghij", "hf")


def _outside(tmp_path: Path, hf_home: Path) -> list[Path]:
    """Every file or link under ``tmp_path`` that is not under ``hf_home``."""
    return [path for path in tmp_path.rglob("*") if not path.is_dir() and not path.is_relative_to(hf_home)]


def _fetch(tmp_path: Path, repo: Repo, wanted: HubRepo = MODEL) -> list[dict]:
    with HubServer({(wanted.repo_type, wanted.repo_id): repo}) as hub:
        return fetch([wanted], _home(tmp_path), token=None, endpoint=hub.url)


def test_an_lfs_file_behind_a_redirect_is_named_by_the_hubs_linked_etag(tmp_path, monkeypatch):
    """The real hub serves weights (LFS/Xet) as a 302 to its storage: the blob is named by the hub's X-Linked-Etag
    (the sha256), never the storage's own ETag, and huggingface_hub reads it offline."""
    weights = FILES["model.safetensors"]
    rows = _fetch(tmp_path, Repo(dict(FILES), lfs={"model.safetensors"}))
    hf_home = _home(tmp_path)
    assert rows[0]["files"] == 2
    storage = hf_home / "hub" / "models--org--tiny-model"
    assert (storage / "blobs" / hashlib.sha256(weights).hexdigest()).read_bytes() == weights
    from huggingface_hub import hf_hub_download

    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", True)
    path = hf_hub_download("org/tiny-model", "model.safetensors", cache_dir=hf_home / "hub", local_files_only=True)
    assert Path(path).read_bytes() == weights and not _outside(tmp_path, hf_home)


def test_an_lfs_redirect_whose_linked_etag_is_a_path_is_refused(tmp_path):
    with pytest.raises(FetchError, match="ETag"):
        _fetch(tmp_path, Repo(dict(FILES), lfs={"model.safetensors"}, etags={"model.safetensors": f'"{UP}"'}))
    assert not _outside(tmp_path, _home(tmp_path))


def test_an_honest_hub_fills_the_cache_in_huggingface_hubs_layout(tmp_path, monkeypatch):
    rows = _fetch(tmp_path, Repo(dict(FILES)))
    hf_home = _home(tmp_path)
    assert rows[0]["files"] == 2 and rows[0]["bytes"] == sum(map(len, FILES.values()))
    storage = hf_home / "hub" / "models--org--tiny-model"
    commit = (storage / "refs" / "main").read_text()
    pointer = storage / "snapshots" / commit / "model.safetensors"
    assert pointer.is_symlink() and pointer.read_bytes() == FILES["model.safetensors"]
    assert pointer.resolve().parent == (storage / "blobs").resolve()
    assert not list((storage / "blobs").glob("*.incomplete")) and not _outside(tmp_path, hf_home)
    # huggingface_hub reads it offline, as every cluster job does
    from huggingface_hub import hf_hub_download

    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", True)
    path = hf_hub_download("org/tiny-model", "config.json", cache_dir=hf_home / "hub", local_files_only=True)
    assert Path(path).read_bytes() == FILES["config.json"]


@pytest.mark.parametrize("commit", [UP, "a" * 39, "A" * 40, "a" * 40 + "/..", "a" * 20 + "\0" + "a" * 19])
def test_a_commit_that_is_not_a_sha_is_refused_before_it_becomes_a_path(tmp_path, commit):
    with pytest.raises(FetchError, match="not a 40-hex sha"):
        _fetch(tmp_path, Repo(dict(FILES), commit=commit))
    assert not _outside(tmp_path, _home(tmp_path))


@pytest.mark.parametrize("etag", [f'"{UP}"', '"../blobs/x"', '"' + "a" * 40 + '/"', '"' + "b" * 63 + '\\0"',
                                  '"abc"', 'W/".."'])
def test_an_etag_that_is_not_a_blob_id_is_refused_before_it_becomes_a_path(tmp_path, etag):
    with pytest.raises(FetchError, match="not a 40- or 64-hex blob id"):
        _fetch(tmp_path, Repo(dict(FILES), etags={"config.json": etag}))
    assert not _outside(tmp_path, _home(tmp_path))


def test_a_commit_stated_differently_on_the_file_than_on_the_repository_is_refused(tmp_path):
    class Twofaced(Repo):
        served = 0

        @property
        def sha(self) -> str:  # both info calls (gated check, download) get one commit, every file another
            Twofaced.served += 1
            return ("1" if Twofaced.served <= 2 else "2") * 40

    with pytest.raises(FetchError, match=r"served from commit 2{40}, asked 1{40}"):
        _fetch(tmp_path, Twofaced(dict(FILES)))


def test_a_file_name_with_dot_dot_is_refused(tmp_path):
    with pytest.raises(FetchError, match="not a plain relative path"):
        _fetch(tmp_path, Repo({"../../../../../../../../../../../escaped.txt": b"x", **FILES}))
    assert not _outside(tmp_path, _home(tmp_path))


@pytest.mark.parametrize("body", [None, FILES["model.safetensors"] + b"\0", b"\1" * 63])
def test_a_body_other_than_its_stated_size_keeps_nothing(tmp_path, body):
    """Endless, one byte too many (no Content-Length: only counting while streaming sees it) or one short: the
    download stops as soon as the stated size is passed, and no blob or temporary file stays."""
    started = time.monotonic()
    with pytest.raises(FetchError, match=r"stated 64 bytes|the tree states 64"):
        _fetch(tmp_path, Repo(dict(FILES), bodies={"model.safetensors": body}))
    assert time.monotonic() - started < 30  # an endless body is cut at 64 bytes, not read to the end
    blob = hashlib.sha1(FILES["model.safetensors"]).hexdigest()
    blobs = _home(tmp_path) / "hub" / "models--org--tiny-model" / "blobs"
    assert not (blobs / blob).exists() and not list(blobs.glob(".*incomplete"))


def test_a_content_length_other_than_the_stated_size_is_refused_before_the_body(tmp_path):
    """The tree states 23 bytes for config.json; the file's own headers say 64."""
    class Padded(Repo):
        def tree(self, prefix: str, recursive: bool) -> list[dict]:
            return [entry | {"size": 23} for entry in super().tree(prefix, recursive)]

    with pytest.raises(FetchError, match="Content-Length '64' but the tree states 23 bytes"):
        _fetch(tmp_path, Padded({"model.safetensors": FILES["model.safetensors"]}))


def test_a_revision_that_leaves_refs_is_refused(tmp_path):
    with pytest.raises(FetchError, match="not a plain relative path"):
        _fetch(tmp_path, Repo(dict(FILES)), HubRepo("model", "org/tiny-model", revision="../../../escaped"))
    assert not _outside(tmp_path, _home(tmp_path))


def test_checks_name_what_the_hub_stated():
    assert check_commit("0123456789abcdef0123456789abcdef01234567", "x") == "0123456789abcdef0123456789abcdef01234567"
    assert check_etag('W/"' + "f" * 64 + '"', "x") == "f" * 64
    with pytest.raises(ConfinementError, match=r"org/m: the hub stated ETag '\"\.\./\.\./etc\"'"):
        check_etag('"../../etc"', "org/m")


def test_confined_writes_refuse_and_report_writes_outside_even_when_caught(tmp_path):
    """The guard of the code fetch does not own (datasets, huggingface_hub): a write outside is refused before it
    happens, and the block fails naming the file even when that code caught the PermissionError."""
    root, outside = tmp_path / "hf", tmp_path / "escaped.txt"
    root.mkdir()
    with pytest.raises(ConfinementError, match=r"escaped\.txt"), confined_writes(root):
        (root / "inside.txt").write_text("ok")
        with contextlib.suppress(PermissionError):
            outside.write_text("no")
    with pytest.raises(ConfinementError, match=r"os\.symlink"), confined_writes(root):
        (root / "link").symlink_to("../escaped.txt")  # a link inside that points outside
    assert (root / "inside.txt").read_text() == "ok" and not outside.exists() and not (root / "link").exists()
    outside.write_text("fine")  # outside a block nothing is guarded
    assert outside.read_text() == "fine"


@pytest.mark.parametrize(("head", "error"), [({"X-Repo-Commit": "c" * 40, "ETag": f'"{UP}"'}, "outside HF_HOME"),
                                             ({"X-Repo-Commit": UP}, "Invalid pointer path")])
def test_the_datasets_step_is_confined_too(tmp_path, head, error):
    """A hub that answers fetch's own download honestly but states a ``../`` ETag or commit on ``HEAD`` (what
    huggingface_hub's ``hf_hub_download`` asks when ``datasets`` prepares the dataset): the ETag's write is refused
    by the confinement (the commit by huggingface_hub's own pointer check), and fetch fails with nothing outside.
    That ``HEAD`` is asked only for a revision that is a name (``main``): fetch run as the rule runs it reads the hub
    lock's commit (pinned here with ``--relock``, the hub's ``repo_info`` being honest), which ``datasets`` finds in
    the snapshot fetch just confined, so it succeeds without asking ``HEAD`` of any file the repository holds (only of
    absent ones, answered 404); :func:`fetch` without a lock asks, and is confined."""
    from tests.jobs.test_site import README, _parquet

    repo = Repo({"README.md": README, "main/train-00000-of-00001.parquet": _parquet()}, head=head)
    env = {key: value for key, value in repo_env().items() if not key.startswith("HF_")}
    locked, unlocked = tmp_path / "locked", tmp_path / "unlocked"
    for folder in (locked, unlocked):
        folder.mkdir()
        (folder / "repos.json").write_text(repos_json([HubRepo("dataset", "org/tiny-data", why="d",
                                                                configs=("main",))]))
    command = [sys.executable, "-m", "pipeline_lib.jobs.fetch", "--repos", "repos.json", "--lock", "hub.lock.json"]
    unlocked_fetch = ("import sys\nfrom pipeline_lib.jobs.fetch import FetchError, fetch\nfrom pipeline_lib.plan.hub "
                      "import load_repos\ntry:\n    fetch(load_repos('repos.json'), sys.argv[1], None, sys.argv[2])\n"
                      "except FetchError as error:\n    sys.exit(f'fetch failed: {error}')\n")
    with HubServer({("dataset", "org/tiny-data"): repo}) as hub:  # datasets reads HF_ENDPOINT at import: a process
        hub_env = env | {"HF_ENDPOINT": hub.url}
        pinned = subprocess.run([*command, "--relock"], capture_output=True, text=True, timeout=300, env=hub_env,
                                cwd=locked)
        assert pinned.returncode == 0, pinned.stderr[-2000:]
        rule = subprocess.run([*command, "--hf-home", str(_home(locked)), "--out", "fetch.json"],
                              capture_output=True, text=True, timeout=300, env=hub_env, cwd=locked)
        assert rule.returncode == 0, rule.stderr[-2000:]
        assert not [line for line in hub.requests if line.startswith("HEAD") and line.endswith(tuple(repo.files))]
        result = subprocess.run([sys.executable, "-c", unlocked_fetch, str(_home(unlocked)), hub.url],
                                capture_output=True, text=True, timeout=300, env=env | {"HF_HOME": str(_home(unlocked)),
                                                                                       "HF_ENDPOINT": hub.url},
                                cwd=unlocked)
    assert result.returncode == 1 and error in result.stderr and "../../../../../../../../../.." in result.stderr, \
        result.stderr[-2000:]
    assert _outside(unlocked, _home(unlocked)) == [unlocked / "repos.json"]
