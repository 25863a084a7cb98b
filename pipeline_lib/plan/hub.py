"""Every Hugging Face hub repository a config's plan reads, in one list: `fetch` downloads it on the submit host and
the GPU canary checks it is in the cache, so the two can never disagree about what "the plan's models" are.

Cluster jobs run offline (``HF_HUB_OFFLINE=1``, :data:`OFFLINE_ENV`), so anything missing here would fail on a node
after it queued. Sources: each run's model (``RunSpec.model``: the SFT/RL base, the 3B scale model), the OPD
teacher (``teacher.hub``), the served judges' models (``judge.<name>.serve.command``), the enabled datasets' hub
sources (``data.datasets.<name>.sources``), the datasets of the transfer study's lm-eval tasks
(:data:`LM_EVAL_DATASETS`) and AlpacaEval's own repository (:data:`ALPACA_EVAL_REPO`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from pipeline_lib.core.env import env
from pipeline_lib.plan.judges import JUDGES, judge_spec
from pipeline_lib.plan.runs import Plan
from pipeline_lib.plan.targets import requests_of, transfer_runs

__all__ = ["ALPACA_EVAL_CONFIGS", "ALPACA_EVAL_INSTRUCTIONS", "ALPACA_EVAL_REPO", "EVERY_CONFIG", "HUB_LOCK",
           "HUB_LOCK_ENV", "LM_EVAL_DATASETS", "OFFLINE_ENV", "RELOCK", "HubRepo", "hf_home", "hub_lock_problems",
           "hub_repos", "is_hub_id", "load_repos", "lock_key", "locked_commits", "offline_exports", "read_hub_lock",
           "reads_hub", "repos_json", "run_hub_models"]

#: lm-eval task -> the hub dataset its task YAML reads (``dataset_path`` in lm_eval/tasks/...): lm-eval downloads it
#: at run time, so `fetch` must put it in the cache first. A task missing here is an error naming this table
#: (tests/jobs/test_site.py checks each entry against the installed lm_eval's own task files).
LM_EVAL_DATASETS: dict[str, str] = {
    "mmlu": "cais/mmlu",
    "gpqa_main_zeroshot": "Idavidrein/gpqa",
    "gpqa_diamond_zeroshot": "Idavidrein/gpqa",
    "gsm8k": "openai/gsm8k",
}

#: AlpacaEval's hub repository: its ``eval`` instructions (:data:`ALPACA_EVAL_INSTRUCTIONS`, what the checkpoints
#: answer unless ``eval.transfer.alpaca_eval.instructions`` names a file), the reference outputs ``alpaca_eval`` loads
#: with ``datasets`` (the configs of :data:`ALPACA_EVAL_CONFIGS`) and the length-control parameters it reads
#: (``instruction_difficulty.csv``), all at run time: `fetch` puts them in the cache.
ALPACA_EVAL_REPO = "tatsu-lab/alpaca_eval"
ALPACA_EVAL_INSTRUCTIONS = "alpaca_eval.json"
ALPACA_EVAL_CONFIGS: tuple[str | None, ...] = ("alpaca_eval", "alpaca_eval_gpt4_baseline")

#: What every cluster job's shell exports (workflow/rules/common.smk): the hub is read from the cache only.
OFFLINE_ENV = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}

_HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")
_COMMIT = re.compile(r"[0-9a-f]{40}")


#: ``HubRepo.configs`` of a dataset whose every config is read (an lm-eval task group such as mmlu's subjects).
EVERY_CONFIG = ("*",)


@dataclass(frozen=True)
class HubRepo:
    """One hub repository the plan reads: ``repo_type`` is ``model`` or ``dataset``; ``why`` names the config key.
    A dataset's ``configs`` are the configs a job loads with ``datasets.load_dataset`` (``None`` is the default
    config; :data:`EVERY_CONFIG`: all of them): offline, ``datasets`` reads only what was prepared online."""

    repo_type: str
    repo_id: str
    revision: str | None = None
    why: str = ""
    configs: tuple[str | None, ...] = ()


#: The hub lock (issue 57 item 8): each repository the plan reads, at the revision its config asks, resolved to the
#: commit `fetch` downloads and every job reads offline, beside the configs as envs/*.yaml beside their inputs. Written
#: on purpose by :data:`RELOCK`; a plan reading a repository it does not hold is refused (:func:`hub_lock_problems`).
HUB_LOCK = Path("config/hub.lock.json")
#: The command that (re)writes the hub lock for a config (online: it asks the hub for each repository's commit).
RELOCK = "python -m pipeline_lib hub-lock --configfile {configs}"
#: The variable the workflow exports to every job of a plan that reads the hub, so provenance records the commits.
HUB_LOCK_ENV = "PIPELINE_HUB_LOCK"


def lock_key(repo: HubRepo) -> str:
    """A repository's entry in the hub lock: type, id and the revision its config asks (``main`` when none)."""
    return f"{repo.repo_type}:{repo.repo_id}@{repo.revision or 'main'}"


def read_hub_lock(path: str | Path = HUB_LOCK) -> dict[str, str]:
    """Lock key -> commit of a hub lock file (empty when there is none)."""
    path = Path(path)
    if not path.is_file():
        return {}
    repos = json.loads(path.read_text()).get("repos")
    if not isinstance(repos, dict) or not all(isinstance(v, str) and _COMMIT.fullmatch(v) for v in repos.values()):
        raise ValueError(f"{path}: `repos` must map `type:owner/name@revision` to a 40-hex commit; relock it")
    return dict(repos)


def hub_lock_problems(repos: list[HubRepo], path: str | Path = HUB_LOCK) -> list[str]:
    """One line per repository the plan reads that the hub lock does not pin at the revision its config asks."""
    locked = read_hub_lock(path)
    return [f"{repo.repo_type} {repo.repo_id} (revision {repo.revision or 'main'}, from {repo.why}) is not in "
            f"{path}" for repo in repos if lock_key(repo) not in locked]


def locked_commits(repos: list[HubRepo], path: str | Path = HUB_LOCK) -> dict[str, str]:
    """Lock key -> commit for each of ``repos`` (all of them pinned: :func:`hub_lock_problems` is empty)."""
    locked = read_hub_lock(path)
    return {lock_key(repo): locked[lock_key(repo)] for repo in repos}


def is_hub_id(name: object) -> bool:
    """``owner/name`` that is not a path of this checkout (``results/...``) or of the filesystem."""
    return (isinstance(name, str) and bool(_HUB_ID.fullmatch(name)) and not name.startswith(("results/", "config/"))
            and not Path(name).exists())


def _served_model(command: list[str]) -> str | None:
    """The model a ``vllm serve <model> ...`` command loads (the argument after ``serve``)."""
    if "serve" in command and command.index("serve") + 1 < len(command):
        return command[command.index("serve") + 1]
    return None


def run_hub_models(run: Any) -> list[str]:
    """The hub models a planned run loads: its spec's model, an OPD teacher's, and any hub id among its command's
    arguments (a base job's ``--init Qwen/Qwen2.5-1.5B``)."""
    teacher = getattr(getattr(run.spec.baseline, "teacher", None), "hub", None)
    named = [run.spec.model, teacher, *getattr(run, "args", ())]
    return list(dict.fromkeys(name for name in named if is_hub_id(name)))


def reads_hub(run: Any) -> bool:
    """Whether a planned run loads a hub model (:func:`run_hub_models`): its job waits for `fetch`."""
    return bool(run_hub_models(run))


def hub_repos(config: Mapping[str, Any], plan: Plan) -> list[HubRepo]:
    """Every hub model and dataset ``plan`` (of ``config``) reads, deduplicated and sorted; empty for the tiny
    default (its models are trained from scratch and its data is synthetic)."""
    found: dict[tuple[str, str, str | None], tuple[str, list[str | None]]] = {}

    def add(repo_type: str, repo_id: str | None, why: str, revision: str | None = None,
            configs: tuple[str | None, ...] = ()) -> None:
        if repo_id and is_hub_id(repo_id):
            entry = found.setdefault((repo_type, repo_id, revision), (why, []))
            entry[1].extend(config for config in configs if config not in entry[1])

    for run in plan.runs:
        for model in run_hub_models(run):
            add("model", model, f"the model of run {run.job}:{run.key}")
    if requests_of(plan, "judge"):
        for name in JUDGES:
            spec = judge_spec(config, name)
            if spec["kind"] == "llm" and (spec.get("serve") or {}).get("command"):
                add("model", _served_model(list(spec["serve"]["command"])), f"judge.{name}.serve.command")
    for name, dataset in (config["data"].get("datasets") or {}).items():
        if not dataset.get("enabled", True):
            continue
        for role, source in (dataset.get("sources") or {}).items():
            if source.get("local") is None:
                add("dataset", source.get("hub"), f"data.datasets.{name}.sources.{role}", source.get("revision"),
                    (source.get("config"),))
    transfer = config["eval"].get("transfer") or {}
    lm_eval = transfer.get("lm_eval") or {}
    if any(path.endswith("lm_eval.json") for path in transfer_runs(config, plan)):
        for task in lm_eval.get("tasks", []):
            if task not in LM_EVAL_DATASETS:
                raise ValueError(f"eval.transfer.lm_eval.tasks: no hub dataset known for lm-eval task {task!r}; add "
                                 "it to LM_EVAL_DATASETS in pipeline_lib/plan/hub.py so `fetch` downloads it")
            add("dataset", LM_EVAL_DATASETS[task], f"eval.transfer.lm_eval.tasks ({task})", None, EVERY_CONFIG)
    if any(path.endswith("alpaca_eval.json") for path in transfer_runs(config, plan)):
        add("dataset", ALPACA_EVAL_REPO, "eval.transfer.alpaca_eval (instructions, reference outputs, length control)",
            None, ALPACA_EVAL_CONFIGS)
    repos = [HubRepo(kind, repo, revision, why, EVERY_CONFIG if "*" in configs else tuple(configs))
             for (kind, repo, revision), (why, configs) in found.items()]
    return sorted(repos, key=lambda r: (r.repo_type, r.repo_id, r.revision or ""))


def repos_json(repos: list[HubRepo]) -> str:
    """The ``--repos`` file of `fetch` and the canary: one object per repository (read back by ``load_repos``)."""
    return json.dumps([asdict(repo) for repo in repos], sort_keys=True)


def load_repos(path: str | Path) -> list[HubRepo]:
    """The repositories of a ``--repos`` file."""
    return [HubRepo(row["repo_type"], row["repo_id"], row.get("revision"), row.get("why", ""),
                    tuple(row.get("configs") or ())) for row in json.loads(Path(path).read_text())]


def hf_home(config: Mapping[str, Any]) -> str:
    """The hub cache every job reads: ``site.hf_home``, else the environment's HF_HOME, else huggingface_hub's
    default (``~/.cache/huggingface``)."""
    site = config.get("site") or {}
    return site.get("hf_home") or env("HF_HOME") or str(Path("~/.cache/huggingface").expanduser())


def offline_exports(config: Mapping[str, Any], hub_lock: str | Path | None = None) -> str:
    """The shell exports of a cluster job (``export HF_HOME=... HF_HUB_OFFLINE=1 ...; ``): ``HF_HOME`` only where the
    config sets ``site.hf_home`` (else the job inherits the submitting environment's); :data:`HUB_LOCK_ENV` where the
    plan reads the hub (``hub_lock``), so each provenance sidecar records the commits its job read."""
    site = config.get("site") or {}
    pairs = dict(OFFLINE_ENV) | ({"HF_HOME": site["hf_home"]} if site.get("hf_home") else {})
    pairs |= {HUB_LOCK_ENV: str(hub_lock)} if hub_lock else {}
    return "export " + " ".join(f"{key}={value}" for key, value in pairs.items()) + "; "
