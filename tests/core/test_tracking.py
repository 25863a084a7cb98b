"""Live tracking (pipeline_lib.core.tracking): config key, verl's backends and names, the local TensorBoard store
written
as steps happen, and a killed and resumed run's curve with every step once."""

import json
import os
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from pipeline_lib.core.checkpoint import MetricsLog
from pipeline_lib.core.config import ConfigError, validate_config
from pipeline_lib.core.tracking import BACKEND_PACKAGES, BACKENDS, TrackingSettings
from pipeline_lib.jobs.engines.local import rl as rl_module
from tests.conftest import rl_spec

REPO = Path(__file__).resolve().parents[2]
SCHEMA = REPO / "workflow/schemas/config.schema.yaml"


def event_scalars(directory: Path) -> dict[str, list[tuple[int, float]]]:
    """Every scalar in a run's TensorBoard event files, read with TensorBoard's own loader: tag -> [(step, value)]."""
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader

    out: dict[str, list[tuple[int, float]]] = {}
    for path in sorted(directory.glob("events.out.tfevents.*")):
        for event in EventFileLoader(str(path)).Load():
            for value in event.summary.value:
                number = value.tensor.float_val[0] if value.HasField("tensor") else value.simple_value
                out.setdefault(value.tag, []).append((event.step, number))
    return out


def settings(tmp_path: Path, backends: tuple[str, ...] = ("tensorboard",)) -> TrackingSettings:
    return TrackingSettings(backends, str(tmp_path / "tracking"), "softmaxgrpo", "countdown_tiny/softmax_exact/seed0")


def test_backends_are_verls_and_the_schema_lists_them():
    from verl.utils.tracking import Tracking

    assert set(BACKENDS) <= set(Tracking.supported_backend)
    schema = yaml.safe_load(SCHEMA.read_text())["properties"]["tracking"]["properties"]["backends"]
    assert schema["items"]["enum"] == list(BACKENDS) and set(BACKEND_PACKAGES) <= set(BACKENDS)


def test_a_backend_without_its_package_fails_at_parse_time_naming_the_extra():
    import importlib.util

    missing = [b for b, (module, _) in BACKEND_PACKAGES.items() if importlib.util.find_spec(module) is None]
    if not missing:
        pytest.skip("every backend's package is installed here")
    config = yaml.safe_load((REPO / "config/config.yaml").read_text()) | {"tracking": {"backends": [missing[0]]}}
    extra = BACKEND_PACKAGES[missing[0]][1]
    with pytest.raises(ConfigError, match=rf"tracking\.backends.*{missing[0]}.*\.\[{extra}\]"):
        validate_config(config, SCHEMA)
    with pytest.raises(ConfigError, match=r"tracking\.backends"):  # not one of verl's
        validate_config(yaml.safe_load((REPO / "config/config.yaml").read_text())
                        | {"tracking": {"backends": ["tensorbord"]}}, SCHEMA)


def test_the_plan_passes_each_run_its_id_and_verl_its_logger():
    from pipeline_lib.plan import plan_runs

    config = validate_config(yaml.safe_load((REPO / "config/paper.yaml").read_text()), SCHEMA)
    config["tracking"]["backends"] = ["console", "tensorboard"]
    from pipeline_lib.jobs.engines.verl.planned import run_overrides

    runs = plan_runs(config, check_estimators=False).runs
    run = next(r for r in runs if r.job == "train_verl" and r.verl_kind == "rl")
    overrides = run_overrides(run)
    assert {"trainer.logger=[console,file,tensorboard]", "trainer.project_name=softmaxgrpo",
            f"trainer.experiment_name={run.key}"} <= set(overrides)
    tensorboard_dir = next(o for o in overrides if "env_vars.TENSORBOARD_DIR=" in o).split("=", 1)[1]
    assert Path(tensorboard_dir) == (Path("results/tracking") / run.key).resolve()
    # a new dashboard reruns nothing: the rerun key (the command without --tracking) does not name it
    assert "--tracking" in run.command() and "--tracking" not in run.command(tracking=False)


def test_verls_own_tracking_writes_where_the_plan_points_it(tmp_path, monkeypatch):
    """verl's Tracking with the run's trainer.logger and environment: its event files land in the run's store."""
    from verl.utils.tracking import Tracking

    from pipeline_lib.jobs.engines.verl.translate import TrainPaths, tracking_env

    tracking = settings(tmp_path)
    paths = TrainPaths(tmp_path / "run", tmp_path / "train.parquet", tracking=tracking)
    for name, value in tracking_env(paths).items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("VERL_FILE_LOGGER_PATH", str(tmp_path / "verl_metrics.jsonl"))
    tracker = Tracking(tracking.project, tracking.experiment, default_backend=tracking.verl_loggers())
    for step in (1, 2):
        tracker.log({"critic/score/mean": 0.25 * step}, step=step)
    tracker.finish()
    assert event_scalars(tracking.run_dir())["critic/score/mean"] == [(1, 0.25), (2, 0.5)]


def test_a_resumed_verl_run_continues_its_curve_with_every_step_once(tmp_path, monkeypatch):
    """verl's writer appends each attempt's steps; the store is rebuilt up to the checkpoint before verl restarts."""
    from verl.utils.tracking import Tracking

    from pipeline_lib.jobs.engines.verl.runner import rebuild_tracking_store, rotate_metrics
    from pipeline_lib.jobs.engines.verl.translate import TrainPaths, metrics_log_path, tracking_env

    tracking = settings(tmp_path)
    paths = TrainPaths(tmp_path / "run", tmp_path / "train.parquet", tracking=tracking)
    paths.run_dir.mkdir()
    for name, value in tracking_env(paths).items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("VERL_FILE_LOGGER_PATH", str(metrics_log_path(paths.run_dir)))

    def attempt(steps: range) -> None:  # one verl attempt, as runner.run starts it: rotate, rebuild, train
        rotate_metrics(paths.run_dir)
        rebuild_tracking_store(paths, steps.start - 1)
        tracker = Tracking(tracking.project, tracking.experiment, default_backend=tracking.verl_loggers())
        for step in steps:
            tracker.log({"critic/score/mean": step + 0.5 * (steps.start > 1)}, step=step)
        tracker.finish()

    attempt(range(1, 4))  # killed after step 3; its last checkpoint is step 2
    attempt(range(3, 5))
    assert event_scalars(tracking.run_dir())["critic/score/mean"] == [(1, 1.0), (2, 2.0), (3, 3.5), (4, 4.5)]


def test_local_rl_logs_verls_names_and_the_store_holds_the_same_numbers(tiny, tmp_path):
    # 8 prompts a step: the untrained model's replies share a token with some reference's final text (r_sim > 0,
    # so some group has a gradient); with 3 they may all score 0
    spec = rl_spec("softmax_ess", {"ess_fraction": 0.5}, steps=2, prompts_per_step=8)
    rl_module.train_rl(spec, tiny / "data/rl_train.parquet", tiny / "init", tmp_path / "run", 0, progress=False,
                       tracking=settings(tmp_path))
    metrics = [json.loads(line) for line in (tmp_path / "run/metrics.jsonl").read_text().splitlines()]
    shared = {"critic/score/mean", "actor/pg_loss", "actor/kl_loss", "actor/grad_norm", "actor/pg_clipfrac",
              "actor/entropy", "response_length/mean", "timing_s/step", "softmaxgrpo/pass_rate"}
    assert all(shared <= set(m) for m in metrics)
    assert any("softmaxgrpo/tau/median" in m for m in metrics)  # softmax_ess's per-group tau, summarised
    shares = [[m[key] for key in m if key.startswith("softmaxgrpo/allocation/")] for m in metrics]
    assert all(len(s) == 5 and sum(s) == pytest.approx(1.0) for s in shares if s) and any(shares)
    store = event_scalars(tmp_path / "tracking/countdown_tiny/softmax_exact/seed0")
    for key in shared:
        assert store[key] == [(m["step"], pytest.approx(m[key], rel=1e-6)) for m in metrics]


def test_one_figure_reads_a_local_run_and_a_verl_run_by_the_same_names(tiny, tmp_path):
    from pipeline_lib.jobs.engines.verl.train import collect_metrics
    from pipeline_lib.jobs.engines.verl.translate import metrics_log_path
    from pipeline_lib.paper.curves import curves
    from tests.conftest import runs_written

    local = tmp_path / "train/countdown_tiny/softmax_exact/seed0"
    rl_module.train_rl(rl_spec(steps=2), tiny / "data/rl_train.parquet", tiny / "init", local, 0, progress=False)
    verl = tmp_path / "train/gsm8k/softmax_exact/seed0"  # verl's file-logger records, as its trainer writes them
    verl.mkdir(parents=True)
    metrics_log_path(verl).write_text("".join(json.dumps({"step": s, "data": {
        "critic/score/mean": 0.1 * s, "actor/kl_loss": 0.01, "response_length/mean": 100.0 + s}}) + "\n"
        for s in (1, 2)))
    paths = [local / "metrics.jsonl", collect_metrics(verl, 2)]
    assert all({"critic/score/mean", "actor/kl_loss", "response_length/mean"} <= set(json.loads(line))
               for path in paths for line in path.read_text().splitlines())
    curves(runs_written(paths), "test", str(tmp_path / "curves.png"), str(tmp_path / "curves.pdf"))
    assert (tmp_path / "curves.png").stat().st_size > 10_000


def test_a_killed_and_resumed_run_continues_its_curve_with_every_step_once(tiny, tmp_path, monkeypatch):
    data, init, tracking = tiny / "data/rl_train.parquet", tiny / "init", settings(tmp_path)
    real = MetricsLog.write

    def write_then_die(self, record):  # killed after step 3 was logged, one step past the checkpoint at step 2
        real(self, record)
        if self.path.name == "metrics.jsonl" and record["step"] == 3:
            raise KeyboardInterrupt("simulated kill")

    monkeypatch.setattr(MetricsLog, "write", write_then_die)
    with pytest.raises(KeyboardInterrupt):
        rl_module.train_rl(rl_spec(), data, init, tmp_path / "run", 0, progress=False, tracking=tracking)
    before = event_scalars(tracking.run_dir())
    assert [step for step, _ in before["critic/score/mean"]] == [1, 2, 3]
    monkeypatch.undo()
    rl_module.train_rl(rl_spec(), data, init, tmp_path / "run", 0, progress=False, tracking=tracking)
    metrics = [json.loads(line) for line in (tmp_path / "run/metrics.jsonl").read_text().splitlines()]
    after = event_scalars(tracking.run_dir())
    assert [step for step, _ in after["critic/score/mean"]] == [1, 2, 3, 4]
    assert after["actor/kl_loss"] == [(m["step"], pytest.approx(m["actor/kl_loss"], rel=1e-6)) for m in metrics]


def test_the_store_is_written_while_the_run_goes(tiny, tmp_path):
    """A real job (the entry point in its own process): its curve can be read before it finishes."""
    tracking = settings(tmp_path)
    spec = replace(rl_spec(steps=40), reward="similarity")
    command = [sys.executable, "-m", "pipeline_lib.jobs.engines.local.rl", "--spec", spec.to_json(),
               "--data", str(tiny / "data/rl_train.parquet"), "--init", str(tiny / "init"),
               "--run-dir", str(tmp_path / "run"), "--seed", "0", "--tracking", tracking.to_json()]
    env = os.environ | {"PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    job = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline, seen = time.monotonic() + 300, []
        while job.poll() is None and time.monotonic() < deadline and not seen:
            time.sleep(0.2)
            seen = event_scalars(tracking.run_dir()).get("critic/score/mean", []) if tracking.run_dir().exists() else []
        running = job.poll() is None
        assert seen and running, f"no step in the store while the job ran: {job.stderr.read() if not running else ''}"
        assert len(seen) < 40
    finally:
        if job.poll() is None:
            job.kill()
        job.wait()


def verl_step_batch(seed: int = 3):
    """A verl batch as ``RayPPOTrainer.fit`` holds it before ``compute_advantage``: rewards, scores, the reward's
    ``acc``, group uids and the prompt/response layout ``compute_data_metrics`` reads."""
    from tests.conftest import rollout_batch

    data, scores, uids, mask = rollout_batch(seed=seed, binary=True)
    n, length = mask.shape
    data.batch["token_level_scores"] = data.batch["token_level_rewards"].clone()
    data.batch["prompts"] = torch.ones(n, 4, dtype=torch.long)
    data.batch["responses"] = torch.ones(n, length, dtype=torch.long)
    data.batch["attention_mask"] = torch.cat([torch.ones(n, 4), mask], dim=1).long()
    data.non_tensor_batch["acc"] = scores.numpy().astype(np.float64)
    return data, scores, uids, mask


def test_verls_trainer_logs_the_softmaxgrpo_curves_live(tmp_path):
    """verl's own compute_advantage and compute_data_metrics, as fit calls them (module globals of its trainer),
    give the step's metrics dict the local engine's softmaxgrpo/* numbers for the same rollouts."""
    import verl.trainer.ppo.ray_trainer as trainer
    from omegaconf import OmegaConf

    from pipeline_lib.core.rl.advantages import advantage_diagnostics, group_advantages
    from pipeline_lib.core.rl.group_metrics import PASS_RATE_BINS, allocation_key, group_step_metrics, pass_rate_bin
    from pipeline_lib.jobs.engines.verl import step_metrics
    from pipeline_lib.jobs.engines.verl.estimators import group_index

    step_metrics.install_on_import()  # what the estimators' plugin does in every process
    assert {"compute_advantage", "compute_data_metrics"} <= set(trainer.RayPPOTrainer.fit.__code__.co_names)
    config = OmegaConf.create({"adv_estimator": "softmax_ess", "ess_fraction": 0.5, "gamma": 1.0, "lam": 1.0})
    data, scores, uids, mask = verl_step_batch()
    data = trainer.compute_advantage(data, adv_estimator="softmax_ess", num_repeat=6, config=config)
    metrics = trainer.compute_data_metrics(batch=data, use_critic=False)

    groups, lengths = group_index(uids), mask.sum(-1)
    advantages = group_advantages("softmax_ess", scores, groups, ess_fraction=0.5)
    expected = group_step_metrics(scores, advantages.abs(), lengths, groups,
                                  advantage_diagnostics("softmax_ess", scores, groups, ess_fraction=0.5))
    assert "softmaxgrpo/tau/median" in expected and allocation_key(0.0, 0.2) in expected
    assert {k: metrics[k] for k in expected} == pytest.approx(expected, rel=1e-6)
    assert metrics["critic/score/mean"] == pytest.approx(float(scores.mean()))  # verl's own keys are kept
    # the step's allocation bins each group by its own k/M (a live monitor; Table 3 bins by the prompt's other visits,
    # pipeline_lib.paper.results.allocation_bins), with the one binning rule of both
    own = torch.zeros(int(groups.max()) + 1, dtype=torch.float64).index_add_(0, groups, scores.double())
    own = own / torch.bincount(groups).double()
    budget = torch.zeros_like(own).index_add_(0, groups, lengths.double() * advantages.abs().double())
    shares = torch.zeros(len(PASS_RATE_BINS), dtype=torch.float64).index_add_(0, pass_rate_bin(own), budget)
    assert [metrics[allocation_key(*b)] for b in PASS_RATE_BINS] == pytest.approx(
        (shares / shares.sum()).tolist(), rel=1e-6)  # float32 token means

    grpo, *_ = verl_step_batch()  # verl's own estimator: the group curves, no tau
    grpo = trainer.compute_advantage(grpo, adv_estimator="grpo", num_repeat=6, config=config)
    grpo_metrics = trainer.compute_data_metrics(batch=grpo, use_critic=False)
    assert "softmaxgrpo/pass_rate" in grpo_metrics and "softmaxgrpo/tau/median" not in grpo_metrics


def test_every_verl_process_gets_the_curves_from_the_plugin():
    """``import verl`` loads the estimators' plugin (as in each Ray actor); importing verl's trainers afterwards
    (what main_ppo's TaskRunner does) finds their functions wrapped, and a second install is a no-op."""
    code = ("import verl, sys\n"
            "assert 'verl.trainer.ppo.ray_trainer' not in sys.modules\n"
            "import verl.trainer.ppo.ray_trainer as t\n"
            "from pipeline_lib.jobs.engines.verl import step_metrics\n"
            "before = (t.compute_advantage, t.compute_data_metrics)\n"
            "step_metrics.install(t)\n"
            "assert before == (t.compute_advantage, t.compute_data_metrics)\n"
            "import verl.trainer.ppo.v1.trainer_base as v1\n"
            "print(all(hasattr(f, '__softmaxgrpo_wrapped__') for f in (*before, v1.PPOTrainer._compute_advantage)))\n")
    env = os.environ | {"PYTHONPATH": str(REPO), "VERL_USE_EXTERNAL_PLUGINS": "auto"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and out.stdout.strip() == "True", out.stderr[-3000:]


def test_actor_entropy_is_verls_entropy_of_the_old_policy_over_response_tokens(tiny):
    """The entropy the local engine logs comes from the log-prob pass's own logits, on both of its paths (a group
    sharing its prompt, and rows on their own); it equals verl's entropy_from_logits of a plain forward pass."""
    from transformers import AutoTokenizer
    from verl.utils.torch_functional import entropy_from_logits

    from pipeline_lib.core.model import load_model, pack, response_logprobs, response_logprobs_and_entropy

    tokenizer, model = AutoTokenizer.from_pretrained(tiny / "init"), load_model(tiny / "init").eval()
    generator = torch.Generator().manual_seed(1)
    prompts = [tokenizer.encode(t) for t in ["Use [1, 2, 3] and + - * to make 6", "make 7"]]
    rows = [p for p in prompts for _ in range(3)]
    responses = [torch.randint(5, 300, (int(torch.randint(1, 9, (1,), generator=generator)),),
                               generator=generator).tolist() for _ in rows]
    ids, attention, response = pack(rows, responses, tokenizer.pad_token_id)
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=attention).logits.float()
        expected = torch.zeros_like(response)
        expected[:, 1:] = entropy_from_logits(logits[:, :-1]) * response[:, 1:]  # position t-1 predicts token t
        for batch in (slice(None), slice(0, 1)):  # the shared-prompt path, and a single row's plain path
            logprobs, entropy = response_logprobs_and_entropy(model, ids[batch], attention[batch], response[batch])
            assert torch.equal(logprobs, response_logprobs(model, ids[batch], attention[batch], response[batch]))
            torch.testing.assert_close(entropy, expected[batch], atol=1e-4, rtol=1e-4)
    assert float(expected.sum()) > 0


def _mlflow_store(tmp_path: Path, tracking: TrackingSettings) -> dict[str, list[tuple[int, float]]]:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{tmp_path / 'mlruns.db'}")
    experiment = client.get_experiment_by_name(tracking.project)
    (run,) = client.search_runs([experiment.experiment_id])
    assert run.info.run_name == tracking.experiment and run.info.status == "FINISHED"
    return {key: [(m.step, m.value) for m in sorted(client.get_metric_history(run.info.run_id, key),
                                                     key=lambda m: m.step)] for key in run.data.metrics}


def _swanlab_store(tmp_path: Path, tracking: TrackingSettings) -> dict[str, list[tuple[int, float]]]:
    from swanlab.proto.swanlab.record.v1.record_pb2 import Record
    from swanlab.sdk.internal.core_python.store import DataStoreReader

    (path,) = (tmp_path / "swanlog").glob("run-*/run-*.swanlab")  # one offline run, read with swanlab's reader
    reader, out = DataStoreReader(), {}
    reader.open(path)
    for raw in reader:
        record = Record()
        record.ParseFromString(raw)
        if record.HasField("scalar"):
            out.setdefault(record.scalar.key, []).append((record.scalar.step, record.scalar.value.number))
    reader.close()
    return out


def _trackio_store(tmp_path: Path, tracking: TrackingSettings) -> dict[str, list[tuple[int, float]]]:
    from trackio.sqlite_storage import SQLiteStorage

    out: dict[str, list[tuple[int, float]]] = {}
    for row in SQLiteStorage.get_logs(tracking.project, tracking.experiment):
        for key, value in row.items():
            if key not in ("step", "timestamp"):
                out.setdefault(key, []).append((row["step"], value))
    return out


#: backend -> (environment that keeps it local and inside tmp_path, reader of what it wrote)
LOCAL_STORES = {
    "mlflow": (lambda tmp: {"MLFLOW_TRACKING_URI": f"sqlite:///{tmp / 'mlruns.db'}"}, _mlflow_store),
    "swanlab": (lambda tmp: {"SWANLAB_MODE": "offline", "SWANLAB_LOG_DIR": str(tmp / "swanlog")}, _swanlab_store),
    "trackio": (lambda tmp: {"TRACKIO_DIR": str(tmp / "trackio")}, _trackio_store),
}


@pytest.mark.tracking_backends
@pytest.mark.parametrize("backend", sorted(LOCAL_STORES))
def test_each_backend_writes_its_local_store_with_verls_names(backend, tmp_path, monkeypatch):
    """The local engine's writer for mlflow / swanlab / trackio, with the real package, no network and no account:
    a resumed run's history then two live steps land in the backend's own local store, step by step."""
    import importlib.util

    module, extra = BACKEND_PACKAGES[backend]
    if importlib.util.find_spec(module) is None:
        pytest.skip(f"{module} is not installed: pip install -e '.[{extra}]' (docs/usage.md, tests)")
    environment, read = LOCAL_STORES[backend]
    for name, value in environment(tmp_path).items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("HOME", str(tmp_path))  # nothing lands in (or is read from) the real home directory
    monkeypatch.chdir(tmp_path)
    tracking = settings(tmp_path, (backend,))
    from pipeline_lib.core.tracking import Tracker

    tracker = Tracker(tracking, history=[{"step": 1, "critic/score/mean": 0.25, "actor/entropy": 1.5}])
    for step in (2, 3):
        tracker.log({"step": step, "critic/score/mean": 0.25 * step, "softmaxgrpo/allocation/pass_0-0.2": 0.5,
                     "val_pass@4": 0.1 * step, "note": "not a curve"})
    tracker.close()
    store = read(tmp_path, tracking)
    assert store["critic/score/mean"] == [(1, 0.25), (2, 0.5), (3, 0.75)]
    assert store["actor/entropy"] == [(1, 1.5)]
    assert store["softmaxgrpo/allocation/pass_0-0.2"] == [(2, 0.5), (3, 0.5)]
    assert "note" not in store
    at = "val_pass_at_4" if backend == "mlflow" else "val_pass@4"  # MLflow's names by verl's rule (mlflow_key)
    assert store[at] == [(2, pytest.approx(0.2)), (3, pytest.approx(0.3))]


def test_the_imagenet_study_logs_its_evaluations_to_the_store(tmp_path):
    """The objective study (synthetic data) writes each metrics.jsonl record to the run's store, under the names
    of metrics.jsonl; the plan gives each ImageNet run its tracking settings."""
    from pipeline_lib.jobs.classify import train as classify_train
    from pipeline_lib.plan import plan_runs
    from tests.conftest import CLASSIFY_PARAMS, classify_spec

    tracking = TrackingSettings(("tensorboard",), str(tmp_path / "tracking"), "softmaxgrpo",
                                "imagenet/softmax/m8/seed0")
    classify_train.train(classify_spec("softmax", 8), 0, tmp_path / "run", progress=False, params=CLASSIFY_PARAMS,
                         tracking=tracking)
    records = [json.loads(line) for line in (tmp_path / "run/metrics.jsonl").read_text().splitlines()]
    store = event_scalars(tracking.run_dir())
    for key in ("val_top1", "val_pass@4", "loss", "train_reward"):  # TensorBoard's tags: "@" -> "_"
        assert store[key.replace("@", "_")] == [(r["step"], pytest.approx(r[key], rel=1e-6)) for r in records
                                                if key in r]

    config = validate_config(yaml.safe_load((REPO / "config/config.yaml").read_text()), SCHEMA)
    config["imagenet"]["enabled"] = True
    run = next(r for r in plan_runs(config, check_estimators=False).runs if r.job == "train_imagenet")
    assert run.tracking == TrackingSettings.for_run(config, f"imagenet/{run.name}/seed{run.seed}")
    assert "--tracking" in run.command() and "--tracking" not in run.command(tracking=False)


def test_iterative_dpo_logs_each_finished_round_once(tmp_path, capsys):
    """TRL's Iterative DPO (its GPU training is not run here): each finished round's TRL log lines, at the run's
    global step, and its validation accuracy reach the store; a resumed run rebuilds it with every step once."""
    from pipeline_lib.jobs.engines.trl import dpo

    spec = {"steps_per_round": 2, "rounds": 2}
    summaries = []
    for r in (1, 2):
        model = tmp_path / "run/rounds" / f"round{r}" / "model"
        model.mkdir(parents=True)
        (model / "train_log.jsonl").write_text("".join(json.dumps(
            {"step": s, "loss": 0.7 - 0.1 * (2 * r + s), "rewards/margins": 0.1 * s}) + "\n" for s in (1, 2)))
        summaries.append({"round": r, "validation_pass@1_greedy": 0.25 * r})
    tracking = settings(tmp_path)
    for attempt in (summaries[:1], summaries):  # killed after round 1, then resumed: round 1 replayed, round 2 new
        tracker = dpo.Tracker(tracking)
        for summary in attempt:
            dpo._track_round(tracker, tmp_path / "run", spec, summary)
        tracker.close()
    store = event_scalars(tracking.run_dir())
    assert store["loss"] == [(1, pytest.approx(0.4)), (2, pytest.approx(0.3)), (3, pytest.approx(0.2)),
                             (4, pytest.approx(0.1))]
    assert store["val/pass_at_1_greedy"] == [(2, 0.25), (4, 0.5)]
    assert [r["step"] for r in dpo.round_records(tmp_path / "run", spec, 2)] == [3, 4]

    from pipeline_lib.plan import plan_runs

    config = validate_config(yaml.safe_load((REPO / "config/paper.yaml").read_text()), SCHEMA)
    runs = [r for r in plan_runs(config, check_estimators=False).runs if r.job == "train_trl"]
    assert runs and all("--tracking" in r.command() for r in runs)
    with pytest.raises(SystemExit):
        dpo.main(["run", "--help"])
    assert "--tracking" in capsys.readouterr().out


class _TransferQueueStandIn:
    """TransferQueue's kv_batch_get / kv_batch_put over a dict: the Ray-backed store the v1 trainer reads its batch
    from needs a Ray cluster, which the CPU tests do not start; verl's own _compute_advantage runs around it."""

    def __init__(self, fields: dict[str, torch.Tensor], uids) -> None:
        self.fields, self.uids = fields, uids

    def kv_batch_get(self, keys, partition_id, select_fields):
        from tensordict import NonTensorStack, TensorDict

        data = TensorDict({k: v for k, v in self.fields.items() if k in select_fields}, batch_size=[len(keys)])
        data["uid"] = NonTensorStack(*self.uids.tolist())
        return data

    def kv_batch_put(self, keys, partition_id, fields):
        self.fields.update(fields.items())
        return self.batch


def test_verls_v1_trainer_gets_the_softmaxgrpo_curves_in_its_step_metrics(monkeypatch):
    """verl's v1 trainer (GRPO / SoftmaxGRPO runs) hands its step's metrics dict to _compute_advantage; the curves
    land in that dict, equal to the local engine's, and no later call writes to it."""
    from omegaconf import OmegaConf
    from transfer_queue.metadata import KVBatchMeta
    from verl.trainer.ppo.v1 import trainer_base
    from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync

    from pipeline_lib.core.rl.advantages import advantage_diagnostics, group_advantages
    from pipeline_lib.core.rl.group_metrics import group_step_metrics
    from pipeline_lib.jobs.engines.verl import step_metrics
    from pipeline_lib.jobs.engines.verl.estimators import group_index

    step_metrics.install_on_import()
    data, scores, uids, mask = verl_step_batch()
    lengths = mask.sum(-1).long()

    def nested(tensor):  # TransferQueue's layout: one row per response, its own length
        return torch.nested.as_nested_tensor([tensor[i, :lengths[i]] for i in range(len(tensor))],
                                             layout=torch.jagged)

    store = _TransferQueueStandIn({"response_mask": nested(mask.long()),
                                   "rm_scores": nested(data.batch["token_level_rewards"])}, uids)
    store.batch = KVBatchMeta(keys=[f"{u}_{i}_0" for i, u in enumerate(uids)], tags=[{} for _ in uids],
                              partition_id="train")
    monkeypatch.setattr(trainer_base, "tq", store)
    trainer = object.__new__(PPOTrainerSync)  # only the config is read on this path
    trainer.config = OmegaConf.create({"algorithm": {
        "adv_estimator": "softmax_ess", "ess_fraction": 0.5, "gamma": 1.0, "lam": 1.0, "use_kl_in_reward": False},
        "actor_rollout_ref": {"rollout": {"n": 6}}})
    metrics = {"actor/entropy": 0.5}
    trainer._compute_advantage(store.batch, metrics=metrics)

    groups = group_index(uids)
    advantages = group_advantages("softmax_ess", scores, groups, ess_fraction=0.5)
    expected = group_step_metrics(scores, advantages.abs(), lengths.float(), groups,
                                  advantage_diagnostics("softmax_ess", scores, groups, ess_fraction=0.5))
    assert set(metrics) == {"actor/entropy", *expected}
    assert {k: metrics[k] for k in expected} == pytest.approx(expected, rel=1e-6)
    torch.testing.assert_close(store.fields["advantages"].to_padded_tensor(0.0),
                               (advantages[:, None] * mask)[:, :int(lengths.max())])
    import verl.trainer.ppo.ray_trainer as trainer_module

    before = dict(metrics)
    trainer_module.compute_advantage(verl_step_batch()[0], adv_estimator="softmax_ess",
                                     config=trainer.config.algorithm)
    assert metrics == before  # the dict was the step's only while its _compute_advantage ran
