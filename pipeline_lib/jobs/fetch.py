"""`fetch`: download every hub model and dataset the plan reads into HF_HOME, on the submit host (a local rule).

Compute nodes are usually offline, and every cluster job runs with ``HF_HUB_OFFLINE=1`` (workflow/rules/common.smk),
so what is not in the cache before the run fails on a node after it queued. The list is
:func:`pipeline_lib.plan.hub.hub_repos` (the canary checks the same list). Gated repositories (GPQA, some judges)
are found up front from the hub's own metadata: without ``HF_TOKEN`` the job stops before downloading anything and
names every one of them.

The hub's answers are untrusted (``HF_ENDPOINT`` may point anywhere): :mod:`pipeline_lib.jobs.hub_download` checks
every commit sha and ETag before it becomes a path, keeps every file inside ``HF_HOME`` and caps each body at its
stated size while it streams; the ``datasets`` step runs under the same confinement.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pipeline_lib.core.cli import entry_parser
from pipeline_lib.core.env import env, env_text
from pipeline_lib.core.io import write_json
from pipeline_lib.core.provenance import write_provenance
from pipeline_lib.jobs.hub_download import ConfinementError, confined_writes, download_snapshot
from pipeline_lib.plan.hub import EVERY_CONFIG, HubRepo, load_repos

__all__ = ["FetchError", "fetch", "main", "prepare_dataset"]


class FetchError(RuntimeError):
    """A download that cannot succeed as asked (a gated repository without a token, a denied or missing one)."""


def _page(repo: HubRepo) -> str:
    prefix = "datasets/" if repo.repo_type == "dataset" else ""
    return f"https://huggingface.co/{prefix}{repo.repo_id}"


def gated_repos(api: Any, repos: Sequence[HubRepo]) -> list[HubRepo]:
    """The repositories whose hub metadata says ``gated`` (their metadata is public; their files need a token)."""
    from huggingface_hub.utils import RepositoryNotFoundError

    gated, missing = [], []
    for repo in repos:
        try:
            info = api.repo_info(repo.repo_id, repo_type=repo.repo_type, revision=repo.revision, token=False)
        except RepositoryNotFoundError:
            missing.append(repo)
            continue
        if getattr(info, "gated", False):
            gated.append(repo)
    if missing:
        raise FetchError("not on the hub (or private): " + "; ".join(
            f"{r.repo_type} {r.repo_id} (from {r.why})" for r in missing) + ". Fix the name in the config key given.")
    return gated


def fetch(repos: Sequence[HubRepo], hf_home: str | os.PathLike[str], token: str | None,
          endpoint: str | None = None) -> list[dict[str, Any]]:
    """Download each repository's snapshot into ``<hf_home>/hub``; returns one row per repository (id, type, the
    commit it resolved to, files, bytes). Raises :class:`FetchError` before any download when a gated repository
    has no token, naming all of them, and for any hub answer that would write outside ``hf_home`` or past a
    stated size (:mod:`pipeline_lib.jobs.hub_download`)."""
    from huggingface_hub import HfApi
    from huggingface_hub.errors import GatedRepoError

    api = HfApi(endpoint=endpoint)
    gated = gated_repos(api, repos)
    if gated and not token:
        raise FetchError(
            "gated repositories need HF_TOKEN: " + ", ".join(f"{r.repo_id} ({r.why})" for r in gated)
            + ". Accept each one's terms on its page (" + ", ".join(_page(r) for r in gated)
            + "), create a read token at https://huggingface.co/settings/tokens and export HF_TOKEN before `fetch`.")
    Path(hf_home, "hub").mkdir(parents=True, exist_ok=True)
    rows = []
    for repo in repos:
        print(f"fetch: {repo.repo_type} {repo.repo_id} ({repo.why})", file=sys.stderr, flush=True)
        try:
            with confined_writes(hf_home):
                folder = download_snapshot(api, repo.repo_type, repo.repo_id, repo.revision, hf_home, token,
                                           endpoint)
                configs = prepare_dataset(repo, Path(hf_home), token) if repo.repo_type == "dataset" else []
        except GatedRepoError as error:
            raise FetchError(f"{repo.repo_id}: access denied with this HF_TOKEN; accept its terms at {_page(repo)} "
                             f"with the token's account ({type(error).__name__})") from error
        except ConfinementError as error:
            raise FetchError(f"{repo.repo_id} from {endpoint or 'the default hub'}: {error}") from error
        files = [path for path in folder.rglob("*") if path.is_file()]
        rows.append({"repo_type": repo.repo_type, "repo_id": repo.repo_id, "revision": repo.revision,
                     "commit": folder.name, "files": len(files), "bytes": sum(p.stat().st_size for p in files),
                     "configs": configs, "why": repo.why})
    return rows


def prepare_dataset(repo: HubRepo, hf_home: Path, token: str | None) -> list[str | None]:
    """Load each config a job reads with ``datasets.load_dataset`` once, online, into ``<hf_home>/datasets``: offline,
    ``datasets`` reads only a prepared copy (not the hub snapshot). Returns the configs prepared."""
    import datasets

    configs = list(repo.configs or (None,))
    if tuple(configs) == EVERY_CONFIG:
        configs = datasets.get_dataset_config_names(repo.repo_id, revision=repo.revision, token=token or None)
    for config in configs:
        datasets.load_dataset(repo.repo_id, config, revision=repo.revision, token=token or None,
                              cache_dir=str(hf_home / "datasets"))
    return configs


def main(argv: Sequence[str] | None = None) -> int:
    parser = entry_parser(__doc__, summary="line", logs=False)
    parser.add_argument("--repos", required=True, help="JSON list of the plan's hub repositories (hub_repos)")
    parser.add_argument("--hf-home", required=True, help="the cache (site.hf_home); files go to <hf-home>/hub")
    parser.add_argument("--out", required=True, help="the report (JSON), written atomically")
    args = parser.parse_args(argv)
    os.environ.update(HF_HOME=args.hf_home)  # before huggingface_hub / datasets are imported: their caches follow it
    repos = load_repos(args.repos)
    token = env_text("HF_TOKEN", r"\S+", "a Hugging Face token", secret=True)
    try:
        rows = fetch(repos, args.hf_home, token, endpoint=env("HF_ENDPOINT"))
    except FetchError as error:
        print(f"fetch failed: {error}", file=sys.stderr)
        return 1
    write_json(args.out, {"hf_home": str(Path(args.hf_home).resolve()), "repos": rows,
                          "total_gb": round(sum(row["bytes"] for row in rows) / 1e9, 3)})
    write_provenance([args.out], step="fetch", inputs=[args.repos], params={"hf_home": args.hf_home})
    return 0


if __name__ == "__main__":
    sys.exit(main())
