"""Shared fixtures and helpers: a scratch copy of the workflow so tests never touch the checkout's results/, and
what more than one test module uses (the tiny engine setup, dataset specs on the fixtures, reference oracles).
Heavy libraries are imported inside the helpers, so collecting the fast lane stays cheap."""

import contextlib
import os
import re
import shutil
import string
import subprocess
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from pipeline_lib.core.baselines import BaselineSettings
from pipeline_lib.core.run_spec import Estimator, RLSettings, RunSpec, SFTSettings
from pipeline_lib.plan.runs import RunId

REPO = Path(__file__).resolve().parents[1]
WORKFLOW_PARTS = ("Snakefile", "workflow", "config", "envs", "profiles")
#: Appended to a dry-run under profiles/slurm, whose jobs deploy conda envs: Snakemake's dry-run asks `conda info`,
#: and this machine, CI's and the developers' have no conda (no package registry they reach ships it). No rule has an
#: `envmodules:` directive, so env-modules deploys nothing; the plan, resources and partitions stay the profile's
#: (tests/workflow/test_profiles.py checks the profile itself resolves to conda).
NO_CONDA = ("--software-deployment-method", "env-modules")


def runs_written(paths: list[Path]) -> dict[str, RunId]:
    """Files a test wrote at ``.../<task>/<name>/seed<k>/<file>`` -> their runs: the ``--runs`` mapping the plan hands a
    paper step (the test's own record of where it wrote each run's file; the steps never parse a path)."""
    return {str(p): RunId("main", p.parent.parent.parent.name, p.parent.parent.name, int(p.parent.name[4:]),
                          str(p.parent / "DONE.json")) for p in map(Path, paths)}


def _copy_parts(source: Path, target: Path, parts: tuple[str, ...]) -> None:
    """``parts`` of ``source`` into ``target``, modification times kept (Snakemake compares them)."""
    target.mkdir(parents=True, exist_ok=True)
    for part in parts:
        path = source / part
        if path.is_dir():  # Snakemake's locks and half-made records, and bytecode, never travel
            shutil.copytree(path, target / part, symlinks=True,
                            ignore=shutil.ignore_patterns("__pycache__", "locks", "incomplete", "shadow"))
        elif path.is_file():
            shutil.copy2(path, target / part)


@pytest.fixture
def workflow_copy(tmp_path: Path) -> Path:
    _copy_parts(REPO, tmp_path, WORKFLOW_PARTS)
    return tmp_path


def touched_workflow(tmp_path: Path, full_console: bool = False, args: Sequence[str] = (),
                     files: Mapping[str, str] | None = None) -> Callable[..., subprocess.CompletedProcess]:
    """A copy of the workflow and the package in ``tmp_path`` whose every output is a placeholder Snakemake recorded
    as made (``--touch``, no real run; ``args``: the config files, ``--configfile config/paper.yaml``; ``files``:
    written into the copy first, path -> text); returns a runner of ``snakemake ARGS`` there, for dry runs after an
    edit."""
    _copy_parts(REPO, tmp_path, (*WORKFLOW_PARTS, "pipeline_lib"))
    for name, text in (files or {}).items():
        (tmp_path / name).write_text(text)
    env = {"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin:" + str(Path(sys.executable).parent),
           "OMP_NUM_THREADS": "1", "HOME": str(tmp_path), **({"PIPELINE_CONSOLE": "full"} if full_console else {})}

    def snakemake(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "snakemake", *args], cwd=tmp_path, env=env, capture_output=True,
                              text=True, timeout=600)

    summary = snakemake("--summary", *args)
    assert summary.returncode == 0, summary.stderr[-3000:]
    for line in summary.stdout.splitlines()[1:]:
        target = tmp_path / line.split("\t")[0]
        target.parent.mkdir(parents=True, exist_ok=True)
        target.touch()
    touched = snakemake("--touch", "--forceall", "--cores", "1", *args)
    assert touched.returncode == 0, touched.stderr[-3000:]
    return snakemake


# --- the README's main job, once -----------------------------------------------------------------------------------

#: The checkout where the README's main job (plain `snakemake`, the tiny default) has run to completion. `.ci/run` runs
#: the main job first and sets this, so the tests read that one tree instead of running the DAG again.
MAIN_TREE_ENV = "PIPELINE_MAIN_TREE"
#: What a copy of a finished tree takes along: the workflow, its outputs and logs, and Snakemake's records of them
#: (without `.snakemake/metadata` every output would be planned again for "no record of its making").
TREE_PARTS = (*WORKFLOW_PARTS, "results", "logs", ".snakemake")


def session_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The pytest session's temporary folder that every xdist worker shares (each worker's own is one below it)."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


@contextlib.contextmanager
def session_lock(tmp_path_factory: pytest.TempPathFactory, name: str) -> Iterator[Path]:
    """The session folder (:func:`session_dir`), held exclusively by this worker under ``<name>.lock`` for the
    block: what one worker builds there, the others wait for and reuse."""
    import fcntl

    shared = session_dir(tmp_path_factory)
    with open(shared / f"{name}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield shared


@pytest.fixture(scope="session")
def main_tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny default's finished tree (workflow, ``results/``, ``logs/``, ``.snakemake/``): READ ONLY, tests that
    change anything take :func:`main_tree_copy`.

    CI names the checkout its main job ran in (:data:`MAIN_TREE_ENV`); without it the first test that asks runs the
    README's `snakemake` once, in a copy of the workflow shared by every xdist worker of the session (one lock, so the
    workers never both run it). Either way the tree must be up to date: a dry run there plans nothing."""
    named = os.environ.get(MAIN_TREE_ENV)
    with session_lock(tmp_path_factory, "main_tree") as shared:
        tree = Path(named).resolve() if named else shared / "main_tree"
        checked = shared / "main_tree.checked"
        if not checked.exists():
            if not named and not (tree / "results/paper/tables/table1.csv").is_file():
                _copy_parts(REPO, tree, WORKFLOW_PARTS)
                made = snakemake(tree, "--cores", "2", timeout=5400)  # 16-23 min on 2 cores
                assert made.returncode == 0, f"the main job failed in {tree}:\n{made.stderr[-4000:]}"
            plan = snakemake(tree, "-n")
            assert plan.returncode == 0 and "Nothing to be done" in plan.stdout + plan.stderr, (
                f"{tree} is not the main job's finished tree (set {MAIN_TREE_ENV} only after `snakemake` ran there "
                f"with this code):\n{plan.stdout[-3000:]}{plan.stderr[-3000:]}")
            checked.write_text(str(tree))
    return tree


@pytest.fixture
def main_tree_copy(main_tree: Path, tmp_path: Path) -> Path:
    """A writable copy of :func:`main_tree` (modification times kept), for tests that edit the config or rerun."""
    _copy_parts(main_tree, tmp_path / "tree", TREE_PARTS)
    return tmp_path / "tree"


# --- Snakemake in a subprocess --------------------------------------------------------------------------------------

SMALL_THEORY = {"group_size": 4, "taus": [0.1, 1.0], "p_grid_points": 5, "mc_groups": 500,
                "verification_mc_groups": 50_000}


def repo_env() -> dict[str, str]:
    """The environment with this checkout's pipeline_lib first on the path."""
    return os.environ | {"PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}


def snakemake(cwd: Path, *args: str, full_console: bool = False, timeout: float = 600,
              env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """``snakemake ARGS`` in ``cwd``; ``full_console``: Snakemake's own job blocks (every output listed), which tests
    that read a dry run's outputs parse, instead of the one line per job a person sees (pipeline_lib.core.console);
    ``env``: variables set on top of this checkout's environment."""
    env = repo_env() | ({"PIPELINE_CONSOLE": "full"} if full_console else {}) | (env or {})
    return subprocess.run([sys.executable, "-m", "snakemake", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env=env)


def with_specs(text: str, cwd: Path) -> str:
    """A dry run's text with every spec file a command names (``.snakemake/specs/<hash>.json``, written when the plan
    is built) replaced by the JSON it holds, for tests that read a run's settings off its command."""
    return re.sub(r"\.snakemake/specs/[0-9a-f]{16}\.json", lambda m: (cwd / m.group(0)).read_text(), text)


def _planned(result) -> set[str]:
    """Rules in a dry run's job table (empty when there is nothing to do)."""
    lines = result.stdout.splitlines()
    if "Job stats:" not in lines:
        assert "Nothing to be done" in result.stdout + result.stderr, result.stdout[-3000:] + result.stderr[-3000:]
        return set()
    rows = [line.split()[0] for line in lines[lines.index("Job stats:") + 3:] if line.strip()]
    return set(rows[: rows.index("total")])


def _tiny_config():
    import yaml

    return yaml.safe_load((REPO / "config/config.yaml").read_text())


# --- the data builders on tests/fixtures/data -----------------------------------------------------------------------

FIXTURES = Path(__file__).parent / "fixtures" / "data"


def real_spec(name: str, **extra) -> dict:
    sources = {
        "gsm8k": {"main": {"hub": "openai/gsm8k", "config": "main", "local": str(FIXTURES / "gsm8k/main")},
                  "demonstrations": {"hub": "HAD653/gsm8k-cot-120b", "local": str(FIXTURES / "gsm8k/cot")}},
        "countdown": {"main": {"hub": "Jiayi-Pan/Countdown-Tasks-3to4", "local": str(FIXTURES / "countdown/main")},
                      "gold": {"hub": "HuggingFaceTB/Countdown-Task-GOLD", "config": "verified_Qwen2.5-7B-Instruct",
                               "local": str(FIXTURES / "countdown/gold")}},
        "deepmath": {"main": {"hub": "zwhe99/DeepMath-103K", "local": str(FIXTURES / "deepmath/train.jsonl")}},
        "poetry": {"main": {"hub": "jnb666/poems", "local": str(FIXTURES / "poetry/train.jsonl")}},
        "meetingbank": {"main": {"hub": "microsoft/MeetingBank-LLMCompressed",
                                 "local": str(FIXTURES / "meetingbank/train.jsonl")}},
        "openthoughts": {"main": {"hub": "open-thoughts/OpenThoughts3-1.2M",
                                  "local": str(FIXTURES / "openthoughts/train.jsonl")}},
    }[name]
    return {"enabled": True, "sources": sources, "holdout_fraction": 0.3, "text_column": "poem",
            "transcript_column": "prompt", "summary_column": "summary", **extra}


def _deepmath_row(index: int, **fields) -> dict:
    row = {"question": f"What is {index} + {index}?", "final_answer": str(2 * index), "difficulty": 1.0,
           "topic": "arithmetic", "r1_solution_1": f"\\boxed{{{2 * index}}}", "r1_solution_2": "", "r1_solution_3": ""}
    return row | fields


def _build(name, source, tmp_path, **sources):
    from pipeline_lib.core.data.build import build_real

    spec = real_spec(name, holdout_fraction=0.5)
    spec["sources"]["main"]["local"] = str(source)
    for role, path in sources.items():
        spec["sources"][role]["local"] = str(path)
    build_real(name, spec, tmp_path / "out", None)
    return tmp_path / "out"


def _golds(out):
    import pandas as pd

    frames = [pd.read_parquet(out / f"rl_{split}.parquet") for split in ("train", "test")]
    return {row["prompt"][-1]["content"].split("?")[0] + "?": row["reward_model"]["ground_truth"]
            for frame in frames for row in frame.to_dict("records")}


# --- the local engine on tiny shapes --------------------------------------------------------------------------------

ENGINE_TINY = {"n_train": 40, "n_test": 8, "imperfect_fraction": 0.3, "numbers_per_task": [3], "max_number": 9,
               "max_target": 100}
MODEL = {"hidden_size": 32, "intermediate_size": 64, "layers": 2, "heads": 2, "kv_heads": 1, "max_positions": 256}
SFT = {"lr": 3e-3, "weight_decay": 0.0, "warmup_steps": 2, "steps": 6, "batch_size": 8, "max_response_tokens": 48,
       "grad_clip": 1.0, "checkpoint_every": 3}
RL = {"group_size": 4, "prompts_per_step": 3, "steps": 4, "ppo_epochs": 1, "minibatches": 3, "lr": 1e-3,
      "weight_decay": 0.0, "clip_low": 0.2, "clip_high": 0.28, "beta": 0.01, "kl_estimator": "k3",
      "aggregation": "group-token-mean", "max_response_tokens": 16, "temperature": 1.0, "grad_clip": 1.0,
      "checkpoint_every": 2, "prompt_pool": None, "probe_every": None}


def sft_spec(**changes: Any) -> RunSpec:
    """A local SFT run's spec on the tiny shapes: :data:`SFT` with ``changes`` (flat setting names)."""
    return RunSpec(method="sft", task="countdown_tiny", engine="local", model=MODEL,
                   sft=SFTSettings.from_flat({**SFT, **changes}, "local"))


def rl_spec(advantage: str = "softmax", params: dict | None = None, reward_weights: dict | None = None,
            baseline: BaselineSettings | None = None, method: str = "softmax_sim", **changes: Any) -> RunSpec:
    """A local group-RL run's spec on the tiny shapes: :data:`RL` with ``changes`` (flat setting names), SoftmaxGRPO
    (tau 0.3) on the similarity reward unless told otherwise."""
    return RunSpec(method=method, task="countdown_tiny", engine="local",
                   rl=RLSettings.from_flat({**RL, **changes}, "local"),
                   estimator=Estimator(advantage, {"tau": 0.3} if params is None else params),
                   reward_weights={"similarity": 1.0} if reward_weights is None else reward_weights or None,
                   baseline=baseline)


def schema_defaults(node: dict) -> Any:
    """A schema node's default, with its properties' defaults filled in (as the validator fills a config)."""
    if "properties" not in node:
        return node.get("default")
    return {**(node.get("default") or {}), **{key: schema_defaults(child) for key, child in node["properties"].items()}}


def baseline_section_schema(method: str) -> dict:
    """The schema node of ``train.baselines.<method>``."""
    import yaml

    schema = yaml.safe_load((REPO / "workflow/schemas/config.schema.yaml").read_text())
    return schema["properties"]["train"]["properties"]["baselines"]["properties"][method]


def baseline_settings(method: str, **values: Any) -> BaselineSettings:
    """A baseline's typed settings (its registry entry's class): the schema's defaults of ``train.baselines.<method>``
    with ``values`` over them."""
    from pipeline_lib.plan.registry import METHODS

    section = schema_defaults(baseline_section_schema(method)) | values
    return METHODS[method].settings.from_section(section, f"tests: train.baselines.{method}")




@pytest.fixture(scope="session")
def tiny(tmp_path_factory):
    """Tiny countdown data, a tokenizer and an initial model (``data/``, ``tok/``, ``init/``), built once per session
    for every worker (under a lock) and READ ONLY: a test that writes takes its own copy."""
    from transformers import AutoTokenizer

    from pipeline_lib.core.data.build import build_tiny, build_tokenizer
    from pipeline_lib.core.model import build_model, save_model_atomic

    with session_lock(tmp_path_factory, "engine") as shared:
        root = shared / "engine"
        if not (root / "init/config.json").is_file():
            shutil.rmtree(root, ignore_errors=True)  # a worker killed half-way leaves no half-built root behind
            build_tiny("countdown_tiny", ENGINE_TINY, 0, None, root / "data")
            build_tokenizer([root / "data/sft_train.parquet", root / "data/rl_train.parquet"], 400, root / "tok")
            tokenizer = AutoTokenizer.from_pretrained(root / "tok")
            save_model_atomic(build_model(tokenizer, MODEL, 0), tokenizer, root / "init")
    return root


def params(path: Path) -> dict:
    """A checkpoint's parameters, by name (copies)."""
    from pipeline_lib.core.model import load_model

    return {k: v.clone() for k, v in load_model(path).state_dict().items()}


def crash_after(module, step_to_die: int, monkeypatch):
    real = module.TrainingCheckpoint.save

    def save_then_die(self, model, tokenizer, state):
        real(self, model, tokenizer, state)
        if state["step"] == step_to_die:
            raise KeyboardInterrupt("simulated kill")

    monkeypatch.setattr(module.TrainingCheckpoint, "save", save_then_die)


def rollout_batch(seed: int, n_groups: int = 5, group_size: int = 6, binary: bool = True):
    """A verl batch: shuffled string uids (as verl's), ragged response masks, one outcome reward per rollout."""
    import numpy as np
    import torch
    from verl import DataProto

    gen = torch.Generator().manual_seed(seed)
    n, length = n_groups * group_size, 7
    uids = np.array([f"uid-{g:03d}" for g in range(n_groups) for _ in range(group_size)], dtype=object)
    order = torch.randperm(n, generator=gen).numpy()
    uids = uids[order]
    scores = (torch.rand(n, generator=gen) < 0.4).float() if binary else torch.rand(n, generator=gen)
    scores[uids == "uid-001"] = 1.0  # an all-equal group
    lengths = torch.randint(1, length + 1, (n,), generator=gen)
    mask = (torch.arange(length)[None, :] < lengths[:, None]).float()
    rewards = torch.zeros(n, length)
    rewards[torch.arange(n), lengths - 1] = scores  # verl puts the outcome on the last response token
    data = DataProto.from_dict(tensors={"token_level_rewards": rewards, "response_mask": mask},
                               non_tensors={"uid": uids})
    return data, scores, uids, mask


# --- the ImageNet objective study on a synthetic problem ------------------------------------------------------------

CLASSIFY_SPEC = {
    "dataset": {"kind": "synthetic", "root": None, "expected_classes": None, "n_classes": 10, "dim": 8, "n_train": 256,
                "n_val": 128, "noise": 1.0, "seed": 3},
    "model": {"kind": "mlp", "hidden": 16}, "epochs": 2, "batch_size": 32, "eval_batch_size": 128, "lr": 0.1,
    "momentum": 0.9, "weight_decay": 1e-4, "warmup_epochs": 1, "eval_every": 4, "checkpoint_every": 5,
    "pass_k": [4], "num_workers": 0,
}
#: The softmax objective's estimator parameters in those tests (a run spec's ``estimator.params``).
CLASSIFY_PARAMS = {"tau": 0.2}


def classify_spec(objective: str, group_size: int, **changes):
    """The typed settings of one run of those tests (``changes``: run keys replaced, e.g. ``lr=0.05``)."""
    from pipeline_lib.core.run_spec import ImageNetSettings

    return ImageNetSettings.from_dict({**CLASSIFY_SPEC, **changes, "objective": objective, "group_size": group_size})


def final_parameters(run_dir):
    import torch

    return torch.load(run_dir / "final.pt", weights_only=True)


# --- reference implementations (test oracles) -----------------------------------------------------------------------

def official_squad_f1(prediction: str, ground_truth: str) -> float:
    """Transcribed from the official SQuAD v1.1 evaluation script."""
    import re
    from collections import Counter

    def normalize_answer(s):
        def remove_articles(text):
            return re.sub(r"\b(a|an|the)\b", " ", text)

        def white_space_fix(text):
            return " ".join(text.split())

        def remove_punc(text):
            exclude = set(string.punctuation)
            return "".join(ch for ch in text if ch not in exclude)

        return white_space_fix(remove_articles(remove_punc(s.lower())))

    prediction_tokens = normalize_answer(prediction).split()
    ground_truth_tokens = normalize_answer(ground_truth).split()
    common = Counter(prediction_tokens) & Counter(ground_truth_tokens)
    num_same = sum(common.values())
    if num_same == 0:
        return 0
    precision = 1.0 * num_same / len(prediction_tokens)
    recall = 1.0 * num_same / len(ground_truth_tokens)
    return (2 * precision * recall) / (precision + recall)


def lcs_length(a: list[str], b: list[str]) -> int:
    """The textbook dynamic programme for the longest common subsequence (one row at a time)."""
    previous = [0] * (len(b) + 1)
    for x in a:
        current = [0]
        for j, y in enumerate(b):
            current.append(previous[j] + 1 if x == y else max(previous[j + 1], current[j]))
        previous = current
    return previous[-1]


#: Modules of the fast lane (`python -m pytest -m fast`, under 5 minutes on 2 cores): the estimators, the loss,
#: the statistics, the rewards, the theory, the data and provenance contracts. End-to-end training, workflow,
#: Slurm, verl and browser tests stay in the full suite (`.ci/run`).
FAST_MODULES = {"test_advantages", "test_losses", "test_stats", "test_rewards", "test_theory_checks", "test_audit",
                "test_provenance", "test_data", "test_llm_client", "test_reproduction", "test_batch", "test_miniature",
                "test_captions", "test_checkpoint_torn_files", "test_config_mistakes", "test_bad_rows",
                "test_environment", "test_layers", "test_walk"}


#: Test modules that share one pytest-xdist worker, one after the other (``--dist loadgroup``; every other module is
#: its own group, as ``loadfile`` would make it). The two Slurm modules run on the local 2-node cluster and each keeps
#: both cores busy (the main job's judge and paper stages through sbatch, a verl run under Slurm): run side by side
#: on 2 cores the tiny DAG and the verl run took 773 s and 1,288 s (fresh-clone CI, 2026-11-28), each slowed by the
#: other.
SHARED_WORKER = {"tests/workflow/test_slurm.py": "slurm", "tests/workflow/test_slurm_resume.py": "slurm"}
#: The longest modules first, longest-first (CI's junit times, 2026-11-28): xdist hands work out in collection order
#: (``--no-loadscope-reorder``), so the long ones overlap the rest instead of ending the run alone.
LONGEST_FIRST = ("tests/workflow/test_slurm.py", "tests/workflow/test_slurm_resume.py",
                 "tests/jobs/engines/verl/test_verl_cpu.py", "tests/jobs/engines/verl/test_verl_engine.py",
                 "tests/workflow/test_workflow.py", "tests/jobs/engines/test_gpu_baselines.py",
                 "tests/jobs/engines/local/test_baselines.py", "tests/jobs/judge/test_judge_vllm.py",
                 "tests/jobs/test_site.py", "tests/jobs/engines/verl/test_verl_raro.py")


def _module_key(item: pytest.Item) -> str:
    return item.nodeid.split("::", 1)[0]


def _changed_files() -> set[str] | None:
    """Files of the checkout that differ from git HEAD (edited, staged or new), relative to it; None without git."""
    try:
        diff = subprocess.run(["git", "diff", "--name-only", "HEAD"], cwd=REPO, capture_output=True, text=True,
                              timeout=60, check=True).stdout.split()
        new = subprocess.run(["git", "ls-files", "--others", "--exclude-standard"], cwd=REPO, capture_output=True,
                             text=True, timeout=60, check=True).stdout.split()
    except (OSError, subprocess.SubprocessError):
        return None
    return {*diff, *new}


def _code_of(test_file: Path) -> set[str]:
    """The checkout files a test module's code depends on: itself, and every pipeline_lib module it imports with their
    own imports, walked as the workflow's code digests walk an entry point (pipeline_lib.core.provenance)."""
    import ast

    from pipeline_lib.core.provenance import code_modules

    files = {str(test_file.relative_to(REPO))}
    for node in ast.walk(ast.parse(test_file.read_bytes())):
        names = ([alias.name for alias in node.names] if isinstance(node, ast.Import) else
                 [node.module] if isinstance(node, ast.ImportFrom) and node.module else [])
        for name in names:
            if name.split(".")[0] == "pipeline_lib":
                try:
                    files |= set(code_modules(name))
                except ValueError:  # an attribute imported from a module, not a module: its module is walked too
                    files |= set(code_modules(name.rsplit(".", 1)[0]))
    return files


def _mark_changed(items: list[pytest.Item]) -> None:
    """Mark `changed` the tests whose code differs from git HEAD; every test where a shared helper of tests/ (not a
    test module) changed, or where git cannot tell."""
    changed = _changed_files()
    helpers = {path for path in changed or () if path.startswith("tests/")
               and not Path(path).name.startswith("test_")}
    by_file: dict[Path, bool] = {}
    for item in items:
        path = Path(item.path)
        if path not in by_file:
            by_file[path] = changed is None or bool(helpers) or bool(_code_of(path) & changed)
        if by_file[path]:
            item.add_marker(pytest.mark.changed)


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook, which reads the groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark the fast lane's tests `fast` (a test of those modules marked `slow` stays out of it); give each module its
    xdist group (:data:`SHARED_WORKER`) and put the longest modules first (:data:`LONGEST_FIRST`)."""
    for item in items:
        if item.path.stem in FAST_MODULES and item.get_closest_marker("slow") is None:
            item.add_marker(pytest.mark.fast)
        module = _module_key(item)
        item.add_marker(pytest.mark.xdist_group(SHARED_WORKER.get(module, module)))
    if "changed" in (config.option.markexpr or ""):  # only asked for: it reads git and walks the imports
        _mark_changed(items)
    rank = {module: position for position, module in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(_module_key(item), len(rank)))  # stable: the rest keep their order
