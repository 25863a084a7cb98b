"""What the verl path needs to be right on its first GPU run, checked on CPU: which trainer each run uses, and the
project installed where Ray workers import it."""

from __future__ import annotations

from importlib.metadata import EntryPoint
from pathlib import Path

import pytest

from pipeline_lib.jobs.engines.verl.train import VerlRunError, require_installed_project
from pipeline_lib.jobs.engines.verl.translate import ESTIMATOR_MODULE
from pipeline_lib.jobs.engines.verl.validate import validate_rl
from tests.jobs.engines.verl.conftest import PATHS, paper_baselines

REPO = Path(__file__).resolve().parents[4]


def test_each_run_names_the_trainer_its_agent_loops_were_written_for():
    """verl 0.9.1 defaults to its v1 (TransferQueue) trainer; RARO and RL-Logit pin the legacy one, whose manager
    contract (DataProto in and out, ``meta_info.global_steps``) their loops use; the other runs keep v1."""
    from verl.experimental.agent_loop.agent_loop import AgentLoopManager
    from verl.trainer.ppo.v1 import AgentLoopManagerTQ  # importable: TransferQueue is in the test environment

    from pipeline_lib.jobs.engines.verl.raro_loop import RaroAgentLoopManager
    from pipeline_lib.jobs.engines.verl.translate import rl_overrides
    from pipeline_lib.plan.registry import variant_runs
    from pipeline_lib.plan.settings import group_rl_spec, rl_baseline_spec, with_variant

    config = paper_baselines(methods=("opd", "rl_logit", "raro"))
    variants = {method: variant for method, variant in reversed(variant_runs(config).values())}  # each one's first
    for task, method in (("countdown", "raro"), ("gsm8k", "rl_logit"), ("gsm8k", "opd")):
        spec = rl_baseline_spec(config, task, method, "verl")
        spec = with_variant(spec, variants[method]) if method in variants else spec  # RL-Logit: a variant's run
        verl_config = validate_rl(rl_overrides(spec, PATHS, 0))
        assert verl_config.trainer.use_v1 is (method == "opd"), method
    plain = validate_rl(rl_overrides(group_rl_spec(config, "gsm8k", "softmax_exact", "verl"), PATHS, 0))
    assert plain.trainer.use_v1 is True
    # the reason for the pin: RARO's manager is the legacy kind, which the v1 task runner cannot drive
    assert issubclass(RaroAgentLoopManager, AgentLoopManager) and not issubclass(RaroAgentLoopManager,
                                                                                 AgentLoopManagerTQ)


def test_the_gpu_environment_installs_the_project():
    """Snakemake runs the env's post-deploy script after creating it (from the repository root): it installs the
    project, whose entry point registers the estimators (tests/workflow/test_envs.py runs the script's refusal
    elsewhere)."""
    script = (REPO / "envs/train-verl.post-deploy.sh").read_text()
    assert 'python -m pip install --no-deps -e "$PWD"' in script
    assert f'softmaxgrpo = "{ESTIMATOR_MODULE}"' in (REPO / "pyproject.toml").read_text()


def test_an_environment_without_the_project_fails_at_start_naming_the_fix():
    require_installed_project()  # this one has it (editable install)
    for entry_points in ([], [EntryPoint("softmaxgrpo", "somewhere.else", "verl.plugins")]):
        fix = r"(?s)verl.plugins.*Fix: `pip install --no-deps -e <repo>`.*train-verl.post-deploy.sh"
        with pytest.raises(VerlRunError, match=fix):
            require_installed_project(entry_points)


def test_verl_metrics_carry_each_steps_verifier_timeouts_and_failures(tmp_path):
    """The legacy trainer (RARO, RL-Logit) dumps each rollout's reward extras: the counts come from its dump (v1's
    dump has none: tests/jobs/engines/verl/test_verl_engine.py counts those from the reward hook's records)."""
    import json

    from pipeline_lib.jobs.engines.verl.train import collect_metrics
    from pipeline_lib.jobs.engines.verl.translate import metrics_log_path, rollout_dump_dir

    metrics_log_path(tmp_path).write_text("".join(json.dumps({"step": s, "data": {"critic/score/mean": 0.5}}) + "\n"
                                                  for s in (1, 2)))
    dump = rollout_dump_dir(tmp_path)
    dump.mkdir()
    rows = {1: [{"score": 0.0, "timeouts": 1.0, "failures": 0.0}, {"score": 1.0, "timeouts": 0.0, "failures": 0.0}],
            2: [{"score": 0.0, "math/timeouts": 0.0, "math/failures": 1.0, "similarity/score": 0.3}]}
    for step, records in rows.items():
        (dump / f"{step}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    lines = [json.loads(line) for line in collect_metrics(tmp_path, 2).read_text().splitlines()]
    assert [(m["softmaxgrpo/reward_timeouts"], m["softmaxgrpo/reward_failures"]) for m in lines] == [(1, 0), (0, 1)]
