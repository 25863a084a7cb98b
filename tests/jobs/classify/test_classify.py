"""The objective study: gradients, closed-form metrics, resume and dataset validation."""

import copy
import json
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from pipeline_lib.core.checkpoint import CHECKPOINT_NAME, STALE_DIR
from pipeline_lib.core.config import validate_config
from pipeline_lib.core.data.imagenet import validate_imagefolder
from pipeline_lib.core.rl.estimators import params_from
from pipeline_lib.jobs.classify import train as train_module
from pipeline_lib.jobs.classify.objectives import closed_form_metrics, objective_loss
from pipeline_lib.plan import Estimator, PlanError, plan_runs
from pipeline_lib.plan.settings import imagenet_run_spec
from tests.conftest import CLASSIFY_PARAMS, CLASSIFY_SPEC, classify_spec, final_parameters

REPO = Path(__file__).resolve().parents[3]
SCHEMA = REPO / "workflow" / "schemas" / "config.schema.yaml"


def flat_grad(model: torch.nn.Module, loss: torch.Tensor) -> torch.Tensor:
    model.zero_grad()
    loss.backward()
    return torch.cat([p.grad.flatten() for p in model.parameters()])


def small_problem():
    torch.manual_seed(0)
    model = torch.nn.Linear(6, 10).double()
    inputs = torch.randn(32, 6, dtype=torch.float64)
    labels = torch.randint(10, (32,))
    return model, inputs, labels


def test_softmax_direction_approaches_ml_with_a_large_group_size_at_low_tau():
    model, inputs, labels = small_problem()
    ml = flat_grad(model, objective_loss("ml", model(inputs), labels, 0).loss)
    gen = torch.Generator().manual_seed(1)
    cosines = {}
    for group_size in (4, 4096):
        rl = flat_grad(model, objective_loss("softmax", model(inputs), labels, group_size, {"tau": 0.01}, gen).loss)
        cosines[group_size] = F.cosine_similarity(ml, rl, dim=0).item()
    assert cosines[4096] > 0.97
    assert cosines[4096] > cosines[4]


@pytest.mark.parametrize("objective", ["reinforce", "grpo", "softmax"])
def test_no_correct_sample_means_no_update(objective):
    model, inputs, labels = small_problem()
    with torch.no_grad():
        model.bias[labels.unique()] = -1e4  # the true classes are never sampled
    out = objective_loss(objective, model(inputs), labels, 64, params_from(objective, {"tau": 0.2}),
                         torch.Generator().manual_seed(0))
    assert out.reward_mean == 0.0 and out.groups_with_signal == 0.0
    assert torch.count_nonzero(flat_grad(model, out.loss)) == 0


def test_pass_at_k_closed_form_matches_monte_carlo():
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(64, 10, generator=gen)
    labels = torch.randint(10, (64,), generator=gen)
    closed = closed_form_metrics(logits, labels, (4,))
    draws = torch.multinomial(F.softmax(logits, -1), 4 * 20_000, replacement=True, generator=gen).view(64, 20_000, 4)
    empirical = (draws == labels[:, None, None]).any(-1).float().mean(1)
    assert torch.allclose(closed["pass@4"], empirical, atol=0.02)
    assert torch.allclose(closed["pass@1"], F.softmax(logits, -1)[torch.arange(64), labels])


def test_unknown_objective_and_bad_group_size():
    model, inputs, labels = small_problem()
    with pytest.raises(ValueError, match="unknown objective"):
        objective_loss("ppo", model(inputs), labels, 4)
    with pytest.raises(ValueError, match=r"needs group_size \(M\) >= 1, got 0"):
        objective_loss("grpo", model(inputs), labels, 0)


def test_resume_after_a_kill_reproduces_the_uninterrupted_run(tmp_path, monkeypatch):
    straight = tmp_path / "straight"
    train_module.train(classify_spec("softmax", 8), 0, straight, progress=False, params=CLASSIFY_PARAMS)

    interrupted = tmp_path / "interrupted"
    real_save = train_module.save_checkpoint

    def save_then_die(run_dir, state):
        real_save(run_dir, state)
        if state["step"] == 10:
            raise KeyboardInterrupt("simulated kill after the step-10 checkpoint")

    monkeypatch.setattr(train_module, "save_checkpoint", save_then_die)
    with pytest.raises(KeyboardInterrupt):
        train_module.train(classify_spec("softmax", 8), 0, interrupted, progress=False, params=CLASSIFY_PARAMS)
    assert not (interrupted / "DONE.json").exists()
    monkeypatch.setattr(train_module, "save_checkpoint", real_save)
    train_module.train(classify_spec("softmax", 8), 0, interrupted, progress=False, params=CLASSIFY_PARAMS)

    a, b = final_parameters(straight), final_parameters(interrupted)
    for key in a:
        torch.testing.assert_close(a[key], b[key])
    assert (straight / "metrics.jsonl").read_text() == (interrupted / "metrics.jsonl").read_text()
    done = json.loads((interrupted / "DONE.json").read_text())
    assert done["final_step"] == done["total_steps"] == 16


def test_resume_with_a_different_config_sets_the_old_state_aside(tmp_path, monkeypatch):
    real_save = train_module.save_checkpoint

    def save_then_die(run_dir, state):
        real_save(run_dir, state)
        raise KeyboardInterrupt

    monkeypatch.setattr(train_module, "save_checkpoint", save_then_die)
    with pytest.raises(KeyboardInterrupt):
        train_module.train(classify_spec("grpo", 4), 0, tmp_path, progress=False)
    monkeypatch.setattr(train_module, "save_checkpoint", real_save)
    train_module.train(classify_spec("grpo", 4, lr=0.05), 0, tmp_path / "other", progress=False)
    train_module.train(classify_spec("grpo", 4, lr=0.05), 0, tmp_path, progress=False)  # not resumed
    assert sorted(p.name for p in (tmp_path / STALE_DIR).glob("*/*")) == [CHECKPOINT_NAME, "metrics.jsonl"]
    assert (tmp_path / "metrics.jsonl").read_text() == (tmp_path / "other/metrics.jsonl").read_text()


def test_imagefolder_validation(tmp_path):
    with pytest.raises(FileNotFoundError, match="train"):
        validate_imagefolder(tmp_path, None)
    for split, classes in (("train", ["n01", "n02"]), ("val", ["n01", "n03"])):
        for name in classes:
            (tmp_path / split / name).mkdir(parents=True)
    with pytest.raises(ValueError, match=r"only in train: \['n02'\].*only in val: \['n03'\]"):
        validate_imagefolder(tmp_path, None)
    (tmp_path / "val" / "n03").rmdir()
    (tmp_path / "val" / "n02").mkdir()
    assert validate_imagefolder(tmp_path, 2) == ["n01", "n02"]
    with pytest.raises(ValueError, match="expected 1000"):
        validate_imagefolder(tmp_path, 1000)


def _with_defaults(section: dict) -> dict:
    """The ``imagenet`` section with the schema's defaults filled in, as the workflow plans it."""
    return validate_config({"imagenet": copy.deepcopy(section)}, SCHEMA, base_dir=REPO)["imagenet"]


def test_run_targets_and_spec():
    section = {"enabled": True, "objectives": ["ml", "softmax"], "group_sizes": [4, 16], "seeds": [0, 1], "lr": 0.1,
               "tau": 0.1}
    runs = plan_runs({"imagenet": _with_defaults(section)}).requests["imagenet"]
    assert "results/train/imagenet/ml/m0/seed1/DONE.json" in {request.path for request in runs}
    assert "results/train/imagenet/softmax/m16/seed0/DONE.json" in {request.path for request in runs}
    assert len(runs) == 2 + 4
    assert imagenet_run_spec(section) == {"lr": 0.1, "tau": 0.1}


def test_an_imagenet_objective_is_an_estimator_with_its_parameters_from_the_imagenet_section():
    section = _with_defaults({"enabled": True, "objectives": ["ml", "grpo", "softmax"], "group_sizes": [4],
                              "seeds": [0], "lr": 0.1, "tau": 0.3})
    specs = {run.method: run.spec for run in plan_runs({"imagenet": section}).runs}
    assert specs["softmax"].estimator == Estimator("softmax", {"tau": 0.3})  # imagenet.tau: softmax's tau field
    assert specs["grpo"].estimator == Estimator("grpo", {})  # eps keeps its dataclass default
    assert specs["ml"].estimator is None
    assert all("tau" not in spec.settings for spec in specs.values())  # one home: the estimator's params
    retuned = {run.method: run.spec for run in plan_runs({"imagenet": {**section, "tau": 3.0}}).runs}
    assert retuned["ml"] == specs["ml"] and retuned["grpo"] == specs["grpo"]  # a new tau reruns softmax only
    assert retuned["softmax"] != specs["softmax"]
    with pytest.raises(PlanError, match=r"imagenet objective 'softmax'.*needs parameter\(s\) \['tau'\]"):
        plan_runs({"imagenet": {k: v for k, v in section.items() if k != "tau"}})


def test_the_trainer_takes_the_estimator_parameters_its_spec_carries(tmp_path):
    with pytest.raises(TypeError, match=r"needs parameter\(s\) \['tau'\]"):
        train_module.train(classify_spec("softmax", 8), 0, tmp_path, progress=False)
    with pytest.raises(TypeError, match=r"unknown parameter\(s\) \['tau'\]"):
        train_module.train(classify_spec("grpo", 8), 0, tmp_path, progress=False, params=CLASSIFY_PARAMS)


def test_m_is_group_size_from_the_plans_command_to_the_paper_table(tmp_path, monkeypatch):
    """M is ``group_size`` end to end: the plan's command passes ``--group-size`` (checked against the spec), the run's
    DONE.json records ``group_size``, and the paper's curves and summary key on it; the table labels it M."""
    from pipeline_lib.paper import imagenet as paper_imagenet

    section = _with_defaults({"enabled": True, "objectives": ["grpo"], "group_sizes": [4], "seeds": [0],
                              **{k: v for k, v in CLASSIFY_SPEC.items() if k != "epochs"}, "epochs": 1})
    (run,) = plan_runs({"imagenet": section}).runs
    args = list(run.args[3:])
    assert args[args.index("--group-size") + 1] == "4" and "--rollouts" not in args
    args[args.index("--run-dir") + 1] = str(tmp_path / "run")
    monkeypatch.setattr(torch, "set_num_threads", lambda n: None)  # not this test process's threads
    wrong = [*args]
    wrong[wrong.index("--group-size") + 1] = "8"
    with pytest.raises(SystemExit, match=r"--group-size 8 but the spec's imagenet settings say .*group_size 4"):
        train_module.main(wrong)
    assert train_module.main(args) == 0
    done = json.loads((tmp_path / "run" / "DONE.json").read_text())
    assert done["group_size"] == 4 and "rollouts" not in done
    curves, summary = paper_imagenet.collect([tmp_path / "run" / "DONE.json"])
    assert set(curves["group_size"]) == {4} and "rollouts" not in curves.columns
    assert summary[["objective", "group_size"]].values.tolist() == [["grpo", 4]]
    paper_imagenet.render(curves, summary, "test", str(tmp_path / "f.png"), str(tmp_path / "f.pdf"), tmp_path / "t")
    table = (tmp_path / "t.csv").read_text().splitlines()
    assert table[0].startswith("Objective,M,") and table[1].startswith("GRPO,4,")
