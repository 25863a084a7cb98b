"""The locked conda envs (pipeline_lib.jobs.envlock): each env file is the lock of its input, pins builds from PyPI (no
local ``+cpu`` build), and holds what the planned runs of its rules ask for at run time (the rollout, the attention
implementation, the generation and judge backends); and the attention the GPU runs use (sdpa, since no flash-attn
wheel exists for the locked torch) computes over verl's packed micro-batches what attention per sequence does.

CI re-resolves every lock against PyPI (`python -m pipeline_lib.jobs.envlock check` in .ci/run); these tests stay
offline.
"""

from __future__ import annotations

import inspect
import re
import shutil
from pathlib import Path

import pytest

from pipeline_lib.jobs import envlock
from pipeline_lib.jobs.envlock import LockError, canonical, locked_packages
from tests.conftest import REPO, WORKFLOW_PARTS

ENVS = sorted(path.stem for path in (REPO / "envs/inputs").glob("*.yaml"))
#: A generation backend (config `generation.backend`, `eval.backend`) -> the distribution it runs on.
BACKEND_PACKAGES = {"vllm": "vllm", "hf": "transformers", "server": "openai"}
#: A verl rollout engine (`*.rollout.name`, an OPD teacher's `inference.name`) -> the distribution it runs on.
ROLLOUT_PACKAGES = {"vllm": "vllm", "sglang": "sglang", "trtllm": "tensorrt-llm"}
#: A transformers attention implementation -> the distribution that provides it (torch's own need nothing more).
ATTENTION_PACKAGES = {"sdpa": "torch", "eager": "torch", "flex_attention": "torch", "flash_attention_2": "flash-attn",
                      "flash_attention_3": "flash-attn-3"}


def test_every_env_snakemake_reads_has_an_input_and_is_its_current_lock(monkeypatch):
    monkeypatch.chdir(REPO)
    assert {path.stem for path in (REPO / "envs").glob("*.yaml")} == set(ENVS)
    envlock.check(resolve_again=False)


def test_an_edited_input_or_a_hand_edited_lock_fails_the_check_naming_the_env(tmp_path, monkeypatch):
    shutil.copytree(REPO / "envs", tmp_path / "envs")
    monkeypatch.chdir(tmp_path)
    envlock.check(resolve_again=False)
    judge = Path("envs/inputs/judge.yaml")
    judge.write_text(judge.read_text().replace("- tqdm==4.70.1", "- tqdm==4.70.1\n      - rich"))
    with pytest.raises(LockError, match=r"envs/judge.yaml was not made from envs/inputs/judge.yaml") as error:
        envlock.check(resolve_again=False)
    assert "envlock lock judge" in str(error.value) and "cpu-steps.yaml" not in str(error.value)
    shutil.copy2(REPO / "envs/inputs/judge.yaml", judge)
    envlock.check(resolve_again=False)
    locked = Path("envs/cpu-steps.yaml")
    locked.write_text(locked.read_text().replace("channels: [conda-forge]", "channels: [defaults]"))
    with pytest.raises(LockError, match=r"envs/cpu-steps.yaml differs from its input outside the pip entries"):
        envlock.check(resolve_again=False)


def test_the_input_refuses_pip_options_that_a_lock_cannot_hold(tmp_path):
    source = tmp_path / "x.yaml"
    source.write_text("name: x\ndependencies:\n  - python=3.11\n  - pip\n  - pip:\n      - torch==2.11.0\n"
                      "      - -r ../requirements.txt\n")
    with pytest.raises(LockError, match=r"x.yaml:7: '- -r ../requirements.txt' is not a `- requirement` entry"):
        envlock.input_requirements(source)


@pytest.mark.parametrize("env", ENVS)
def test_each_lock_pins_every_package_by_version_and_hash_from_pypi(env):
    """A local version (``2.13.0+cpu``) exists only off PyPI, which refuses them: none may be locked. The locked torch
    is PyPI's CUDA build (its nvidia-* runtime libraries come with it)."""
    packages = locked_packages(REPO / "envs" / f"{env}.yaml")
    assert all(item.hashes for item in packages.values())
    assert not [f"{item.name}=={item.version}" for item in packages.values() if "+" in item.version]
    assert "torch" in packages and "nvidia-cuda-runtime" in packages


#: Override keys that choose an engine or a trainer path (the others set numbers and paths).
_CHOOSES_ENGINES = re.compile(r"(rollout\.name|attn_implementation|use_v1|strategy|distillation\.enabled"
                              r"|inference\.name)$")


def _verl_default_attention() -> str:
    """verl's attention when a run sets none: read from verl's own model config code, not restated here."""
    from verl.workers.config.model import HFModelConfig

    found = re.findall(r'override_config\.get\(\s*"attn_implementation",\s*"([^"]+)"\s*\)',
                       inspect.getsource(HFModelConfig))
    assert len(found) == 1, "verl's default attn_implementation is no longer where this test reads it"
    return found[0]


def _verl_asks(kind: str, overrides: list[str], label: str) -> dict[str, str]:
    """Distribution -> why, for one verl run: its config composed by verl's Hydra config as the job will."""
    from omegaconf import OmegaConf

    from pipeline_lib.jobs.engines.verl.validate import compose

    config = OmegaConf.to_container(compose({"sft": "sft_trainer_engine", "rl": "ppo_trainer"}[kind], overrides),
                                    resolve=True)
    asks = {"verl": f"{label}: the trainer"}
    model = config["model"] if kind == "sft" else config["actor_rollout_ref"]["model"]
    attention = (model.get("override_config") or {}).get("attn_implementation") or _verl_default_attention()
    assert attention in ATTENTION_PACKAGES, f"{label}: attention {attention!r} has no known package"
    asks[ATTENTION_PACKAGES[attention]] = f"{label}: attn_implementation={attention}"
    if kind == "rl":
        rollouts = {config["actor_rollout_ref"]["rollout"]["name"]}
        distillation = config.get("distillation") or {}
        for teacher in (distillation.get("teacher_models") or {}).values() if distillation.get("enabled") else ():
            rollouts.add(teacher["inference"]["name"])
        for rollout in rollouts:
            asks[ROLLOUT_PACKAGES[rollout]] = f"{label}: rollout {rollout}"
    return asks


@pytest.fixture(scope="module")
def paper_rule_envs(tmp_path_factory) -> dict[str, str]:
    from tests.workflow.test_envs import rule_envs

    workdir = tmp_path_factory.mktemp("locks_workflow")
    for part in WORKFLOW_PARTS:
        source = REPO / part
        (shutil.copytree if source.is_dir() else shutil.copy2)(source, workdir / part)
    return rule_envs(workdir, "config/paper.yaml")


def test_each_lock_holds_what_the_paper_plans_runs_ask_for_at_run_time(paper_rule_envs):
    """From the paper config's plan: every verl run's composed config (rollout engines, the OPD teacher's, the
    attention implementation), every run's generation backend and engine, the evaluation backend of the eval rules
    and the judges' serve commands, each checked against the lock of the env its rule runs in."""
    from pipeline_lib.plan import plan_runs
    from pipeline_lib.plan.runs import JOBS
    from pipeline_lib.plan.settings import eval_spec
    from pipeline_lib.plan.table import load_config

    config = load_config([REPO / "config/paper.yaml"])
    plan = plan_runs(config, check_estimators=False)
    asks: dict[str, dict[str, str]] = {}  # env file -> distribution -> why
    composed: dict[tuple[str, ...], dict[str, str]] = {}
    from pipeline_lib.jobs.engines.verl.planned import run_overrides

    for run in plan.runs:
        need = asks.setdefault(JOBS[run.job].conda, {})
        if run.verl_kind:
            overrides = run_overrides(run)
            # one compose per trainer and set of the overrides that choose engines
            shape = (run.verl_kind, *sorted(o for o in overrides if _CHOOSES_ENGINES.search(o.split("=", 1)[0])))
            if shape not in composed:
                composed[shape] = _verl_asks(run.verl_kind, overrides, run.key)
            need.update(composed[shape])
        backend = (run.spec.generation or {}).get("backend")
        if backend:
            need[BACKEND_PACKAGES[backend]] = f"{run.key}: generation.backend={backend}"
        if run.spec.engine == "trl":
            need["trl"] = f"{run.key}: engine trl"
    evaluation = eval_spec(config)["backend"]
    for rule in [name for name in paper_rule_envs if name.startswith("eval_checkpoint")]:
        asks.setdefault(paper_rule_envs[rule], {})[BACKEND_PACKAGES[evaluation]] = f"{rule}: eval.backend={evaluation}"
    for role in ("primary", "second"):
        command = config["judge"][role].get("serve", {}).get("command") or []
        if command:
            server = command[2] if command[:2] == ["python", "-m"] else command[0]
            asks.setdefault(paper_rule_envs["judge_score"], {})[canonical(server.split(".")[0])] = \
                f"judge_score: judge.{role}.serve.command {' '.join(command[:2])}"
    assert asks["train-verl.yaml"].get("vllm") and asks["judge.yaml"].get("vllm")  # the derivation found them
    missing = {env: {package: why for package, why in need.items()
                     if canonical(package) not in locked_packages(REPO / "envs" / env)}
               for env, need in asks.items()}
    assert not {env: found for env, found in missing.items() if found}, missing


def test_sdpa_over_a_packed_micro_batch_equals_attention_per_sequence():
    """verl's remove-padding forward (transformer_impl: one row of every sequence's tokens, per-sequence position
    ids, attention_mask None, use_cache False) with the runs' attention (translate.ATTENTION): transformers must keep
    each sequence to itself, as flash-attn's varlen kernel does; without the position ids the sequences mix."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from pipeline_lib.jobs.engines.verl.translate import ATTENTION

    torch.manual_seed(0)
    config = Qwen2Config(vocab_size=97, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128)
    config._attn_implementation = ATTENTION
    model = Qwen2ForCausalLM(config).eval()
    sequences = [torch.randint(0, 97, (length,)) for length in (7, 12, 5)]
    with torch.no_grad():
        alone = torch.cat([model(input_ids=s[None], use_cache=False).logits[0] for s in sequences])
        packed_ids = torch.cat(sequences)[None]
        positions = torch.cat([torch.arange(len(s)) for s in sequences])[None]
        packed = model(input_ids=packed_ids, position_ids=positions, attention_mask=None, use_cache=False).logits[0]
        mixed = model(input_ids=packed_ids, attention_mask=None, use_cache=False).logits[0]
    assert torch.allclose(packed, alone, atol=1e-5)
    assert not torch.allclose(mixed, alone, atol=1e-2)


def test_each_lock_names_its_cuda_and_the_driver_it_needs():
    """The driver a lock needs comes from its CUDA runtime wheel through the one table (envlock.CUDA_MIN_DRIVER): the
    PyPI locks are CUDA 13.0 builds (driver >= 580); a cu12 wheel's runtime maps to its own row."""
    from pipeline_lib.jobs.envlock import lock_cuda, min_driver_for_cuda

    for env in ENVS:
        assert lock_cuda(REPO / "envs" / f"{env}.yaml") == "13.0", env
    assert min_driver_for_cuda("13.0") == 580 and min_driver_for_cuda("13.0.96") == 580
    assert min_driver_for_cuda("12.8.90") == 570 and min_driver_for_cuda("12.6") == 560
    with pytest.raises(LockError, match=r"no driver requirement known for CUDA '14.1'.*CUDA_MIN_DRIVER"):
        min_driver_for_cuda("14.1")


def _wheel(folder: Path, name: str, version: str) -> Path:
    """A minimal pure-Python wheel (metadata, one module, RECORD) that pip and uv accept."""
    import zipfile

    path = folder / f"{name}-{version}-py3-none-any.whl"
    info = f"{name}-{version.split('+')[0]}.dist-info"
    files = {f"{name}.py": "VALUE = 1\n",
             f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
             f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    with zipfile.ZipFile(path, "w") as archive:
        for member, text in files.items():
            archive.writestr(member, text)
        archive.writestr(f"{info}/RECORD", "".join(f"{member},,\n" for member in [*files, f"{info}/RECORD"]))
    return path


@pytest.fixture
def local_index(tmp_path):
    """A PEP 503 package index on 127.0.0.1 serving one wheel with a local (+cu128) version, as PyTorch's index
    serves torch: yields (index URL, the wheel's sha256)."""
    import functools
    import hashlib
    import http.server
    import threading

    root = tmp_path / "index"
    (root / "simple" / "tinycuda").mkdir(parents=True)
    wheel = _wheel(root, "tinycuda", "1.0.0+cu128")
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    (root / "simple" / "index.html").write_text('<a href="tinycuda/">tinycuda</a>\n')
    (root / "simple" / "tinycuda" / "index.html").write_text(
        f'<a href="../../{wheel.name}#sha256={digest}">{wheel.name}</a>\n')
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/simple", digest
    server.shutdown()
    server.server_close()


def test_an_input_with_an_index_line_locks_against_that_index_and_keeps_the_line_for_pip(tmp_path, monkeypatch,
                                                                                         local_index):
    """A site relocks against CUDA 12.x wheels by naming the index in the input (`- --index-url URL`): uv resolves
    there (here an index on 127.0.0.1 and nothing else, so no network), the lock pins the index's local version and
    file hash, and keeps the index line first so conda's pip installs from it; `check` re-resolves it to the same."""
    import subprocess
    import sys

    url, digest = local_index
    work = tmp_path / "work"
    (work / "envs" / "inputs").mkdir(parents=True)
    monkeypatch.chdir(work)
    monkeypatch.setenv("UV_CACHE_DIR", str(tmp_path / "uv-cache"))
    source = Path("envs/inputs/tiny.yaml")
    source.write_text(f"name: tiny\ndependencies:\n  - python=3.11\n  - pip\n  - pip:\n      - --index-url {url}\n"
                      f"      - tinycuda==1.0.0\n")
    assert envlock.input_indexes(source) == [("index-url", url)]
    assert envlock.input_requirements(source) == ["tinycuda==1.0.0"]
    command = envlock.uv_command("uv", Path("in"), Path("out"), envlock.input_indexes(source))
    assert command[command.index("--index-url") + 1] == url and command[-3:] == ["in", "-o", "out"]

    envlock.lock(["tiny"])
    text = Path("envs/tiny.yaml").read_text()
    assert f'      - "--index-url {url}"\n      - "tinycuda==1.0.0+cu128 --hash=sha256:{digest}"\n' in text
    assert f"--index-url {url} (1 packages)" in text
    assert envlock.locked_packages(Path("envs/tiny.yaml"))["tinycuda"].hashes == {digest}
    envlock.check(["tiny"])  # re-resolved against the same index: the lock is current

    # what conda hands pip (the pip entries, as a requirements file) installs the locked file from that index
    entries = [line.strip()[3:-1] for line in text.splitlines() if line.startswith('      - "')]
    (tmp_path / "requirements.txt").write_text("\n".join(entries) + "\n")
    result = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-cache-dir", "-d",
                             str(tmp_path / "got"), "-r", str(tmp_path / "requirements.txt")],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert [path.name for path in (tmp_path / "got").iterdir()] == ["tinycuda-1.0.0+cu128-py3-none-any.whl"]


@pytest.mark.parametrize(("line", "error"), [
    ("--index-url ftp://mirror/simple", r"'ftp://mirror/simple' is not an http\(s\):// index URL"),
    ("--index-url https://a/simple\n      - --index-url https://b/simple", r"more than one `--index-url` line"),
    ("--trusted-host mirror", r"'- --trusted-host mirror' is not a `- requirement` entry .*--extra-index-url URL"),
])
def test_an_index_line_is_checked_naming_the_file_and_line(tmp_path, line, error):
    source = tmp_path / "x.yaml"
    source.write_text(f"name: x\ndependencies:\n  - pip:\n      - {line}\n      - torch==2.11.0\n")
    with pytest.raises(LockError, match=error):
        envlock.input_requirements(source)


def test_the_usage_docs_driver_table_is_the_librarys():
    """docs/usage.md's CUDA -> driver rows say what min_driver_for_cuda says (one table, the docs a view of it)."""
    from pipeline_lib.jobs.envlock import min_driver_for_cuda

    text = (REPO / "docs" / "usage.md").read_text()
    rows = re.findall(r"^\| (\d+\.\d+)[^|]* \| >= (\d+) \|$", text, re.MULTILINE)
    assert len(rows) >= 3, rows
    assert {cuda: int(driver) for cuda, driver in rows} == {cuda: min_driver_for_cuda(cuda) for cuda, _ in rows}


def test_an_extra_index_resolves_with_the_best_match_strategy_and_the_lock_says_so(tmp_path):
    """A CUDA 12.x relock adds the PyTorch index to PyPI: uv's default strategy would take numpy, jinja2 and the others
    from the first index that has any version of them (the PyTorch index's old copies), so envlock passes
    ``--index-strategy unsafe-best-match`` then, and records it in the lock's header; one index alone needs none."""
    pytorch = ("extra-index-url", "https://download.pytorch.org/whl/cu128")
    command = envlock.uv_command("uv", Path("in"), Path("out"), [pytorch])
    assert command[command.index("--index-strategy") + 1] == envlock.INDEX_STRATEGY == "unsafe-best-match"
    assert "--index-strategy" not in envlock.uv_command("uv", Path("in"), Path("out"), [("index-url", pytorch[1])])
    assert "--index-strategy" not in envlock.uv_command("uv", Path("in"), Path("out"))
    assert "--offline" in envlock.uv_command("uv", Path("in"), Path("out"), offline=True)
    source = tmp_path / "gpu.yaml"
    source.write_text(f"name: gpu\ndependencies:\n  - pip\n  - pip:\n      - --extra-index-url {pytorch[1]}\n"
                      "      - torch==2.11.0\n")
    rendered = envlock.render("gpu", source, f"torch==2.11.0+cu128 --hash=sha256:{'0' * 64}\n")
    assert f"--extra-index-url {pytorch[1]}, --index-strategy unsafe-best-match (1 packages)" in rendered
