"""Live tracking (pipeline_lib.tracking): config key, verl's backends and names, the local TensorBoard store written
as steps happen, and a killed and resumed run's curve with every step once."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from pipeline_lib.checkpoint import MetricsLog
from pipeline_lib.config import ConfigError, validate_config
from pipeline_lib.engines.local import rl as rl_module
from pipeline_lib.tracking import BACKEND_PACKAGES, BACKENDS, TrackingSettings
from tests.conftest import RL

REPO = Path(__file__).resolve().parents[1]
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
    runs = plan_runs(config, check_estimators=False).runs
    run = next(r for r in runs if r.job == "train_verl" and r.verl_kind == "rl")
    assert {"trainer.logger=[console,file,tensorboard]", "trainer.project_name=softmaxgrpo",
            f"trainer.experiment_name={run.key}"} <= set(run.overrides)
    tensorboard_dir = next(o for o in run.overrides if "env_vars.TENSORBOARD_DIR=" in o).split("=", 1)[1]
    assert Path(tensorboard_dir) == (Path("results/tracking") / run.key).resolve()
    # a new dashboard reruns nothing: the rerun key (the command without --tracking) does not name it
    assert "--tracking" in run.command() and "--tracking" not in run.command(tracking=False)


def test_verls_own_tracking_writes_where_the_plan_points_it(tmp_path, monkeypatch):
    """verl's Tracking with the run's trainer.logger and environment: its event files land in the run's store."""
    from verl.utils.tracking import Tracking

    from pipeline_lib.engines.verl.translate import TrainPaths, tracking_env

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

    from pipeline_lib.engines.verl.train import _rotate_metrics, rebuild_tracking_store
    from pipeline_lib.engines.verl.translate import TrainPaths, metrics_log_path, tracking_env

    tracking = settings(tmp_path)
    paths = TrainPaths(tmp_path / "run", tmp_path / "train.parquet", tracking=tracking)
    paths.run_dir.mkdir()
    for name, value in tracking_env(paths).items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("VERL_FILE_LOGGER_PATH", str(metrics_log_path(paths.run_dir)))

    def attempt(steps: range) -> None:  # one verl attempt, as train.run starts it: rotate, rebuild, train
        _rotate_metrics(paths.run_dir)
        rebuild_tracking_store(paths, steps.start - 1)
        tracker = Tracking(tracking.project, tracking.experiment, default_backend=tracking.verl_loggers())
        for step in steps:
            tracker.log({"critic/score/mean": step + 0.5 * (steps.start > 1)}, step=step)
        tracker.finish()

    attempt(range(1, 4))  # killed after step 3; its last checkpoint is step 2
    attempt(range(3, 5))
    assert event_scalars(tracking.run_dir())["critic/score/mean"] == [(1, 1.0), (2, 2.0), (3, 3.5), (4, 4.5)]


def test_local_rl_logs_verls_names_and_the_store_holds_the_same_numbers(tiny, tmp_path):
    spec = RL | {"advantage": "softmax_ess", "advantage_params": {"ess_fraction": 0.5}, "steps": 2}
    rl_module.train_rl(spec, tiny / "data/rl_train.parquet", tiny / "init", tmp_path / "run", 0, progress=False,
                       tracking=settings(tmp_path))
    metrics = [json.loads(line) for line in (tmp_path / "run/metrics.jsonl").read_text().splitlines()]
    shared = {"critic/score/mean", "actor/pg_loss", "actor/kl_loss", "actor/grad_norm", "actor/pg_clipfrac",
              "response_length/mean", "timing_s/step", "softmaxgrpo/pass_rate"}
    assert all(shared <= set(m) for m in metrics)
    assert any("softmaxgrpo/tau/median" in m for m in metrics)  # softmax_ess's per-group tau, summarised
    store = event_scalars(tmp_path / "tracking/countdown_tiny/softmax_exact/seed0")
    for key in shared:
        assert store[key] == [(m["step"], pytest.approx(m[key], rel=1e-6)) for m in metrics]


def test_one_figure_reads_a_local_run_and_a_verl_run_by_the_same_names(tiny, tmp_path):
    from pipeline_lib.engines.verl.train import collect_metrics
    from pipeline_lib.engines.verl.translate import metrics_log_path
    from pipeline_lib.paper.results import curves

    local = tmp_path / "train/countdown_tiny/softmax_exact/seed0"
    rl_module.train_rl(RL | {"steps": 2}, tiny / "data/rl_train.parquet", tiny / "init", local, 0, progress=False)
    verl = tmp_path / "train/gsm8k/softmax_exact/seed0"  # verl's file-logger records, as its trainer writes them
    verl.mkdir(parents=True)
    metrics_log_path(verl).write_text("".join(json.dumps({"step": s, "data": {
        "critic/score/mean": 0.1 * s, "actor/kl_loss": 0.01, "response_length/mean": 100.0 + s}}) + "\n"
        for s in (1, 2)))
    paths = [local / "metrics.jsonl", collect_metrics(verl, 2)]
    assert all({"critic/score/mean", "actor/kl_loss", "response_length/mean"} <= set(json.loads(line))
               for path in paths for line in path.read_text().splitlines())
    curves(paths, "test", str(tmp_path / "curves.png"), str(tmp_path / "curves.pdf"))
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
        rl_module.train_rl(RL, data, init, tmp_path / "run", 0, progress=False, tracking=tracking)
    before = event_scalars(tracking.run_dir())
    assert [step for step, _ in before["critic/score/mean"]] == [1, 2, 3]
    monkeypatch.undo()
    rl_module.train_rl(RL, data, init, tmp_path / "run", 0, progress=False, tracking=tracking)
    metrics = [json.loads(line) for line in (tmp_path / "run/metrics.jsonl").read_text().splitlines()]
    after = event_scalars(tracking.run_dir())
    assert [step for step, _ in after["critic/score/mean"]] == [1, 2, 3, 4]
    assert after["actor/kl_loss"] == [(m["step"], pytest.approx(m["actor/kl_loss"], rel=1e-6)) for m in metrics]


def test_the_store_is_written_while_the_run_goes(tiny, tmp_path):
    """A real job (the entry point in its own process): its curve can be read before it finishes."""
    tracking = settings(tmp_path)
    command = [sys.executable, "-m", "pipeline_lib.engines.local.rl", "--spec", json.dumps(RL | {"steps": 40}),
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
