"""Live experiment tracking (config ``tracking``): one set of metric names and verl's backends on both engines.

A researcher watches a run while it goes. The verl engine hands ``tracking.backends`` to verl's own ``Tracking``
(``trainer.logger``, always with ``file``: its output becomes ``metrics.jsonl``); the local engine writes every
``metrics.jsonl`` record to the same backends through :class:`Tracker`, step by step. Both log under verl's metric
names (``critic/score/mean``, ``actor/kl_loss``...; the project's own quantities under ``softmaxgrpo/``), listed in
``docs/tracking.md``, so one dashboard holds a tiny run and a paper run.

The default backend, ``tensorboard``, writes TensorBoard event files under ``results/tracking/<task>/<run>/seed<k>``
(the local engine with ``tensorboardX``, a ~90 kB package of the default install; verl with
``torch.utils.tensorboard``); ``tensorboard --logdir results/tracking`` (extra ``dashboard``) shows them. No network
and no account are involved. A resumed local run rewrites its event files from ``metrics.jsonl`` (cut back to the
checkpoint), so its curve continues with every step exactly once.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import math
import re
import time
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from pipeline_lib.core.env import env, hidden_package

__all__ = [
    "BACKENDS",
    "BACKEND_PACKAGES",
    "Tracker",
    "TrackingSettings",
    "missing_backend_packages",
    "tracking_from_json",
]

log = logging.getLogger("pipeline_lib.core.tracking")

#: The backends a run may name: those of verl's ``verl.utils.tracking.Tracking.supported_backend`` (0.9.1) that the
#: local engine also writes (tests check they are verl's). ``file`` is always on (``metrics.jsonl``).
BACKENDS = ("console", "file", "tensorboard", "wandb", "mlflow", "swanlab", "trackio")

#: backend -> (module the local engine's writer imports, pip extra of this project that installs it; None: the
#: default install). verl's own writers need the same packages (its ``tensorboard`` writer: ``tensorboard``, a
#: dependency of verl).
BACKEND_PACKAGES: dict[str, tuple[str, str | None]] = {
    "tensorboard": ("tensorboardX", None),
    "wandb": ("wandb", "wandb"),
    "mlflow": ("mlflow", "mlflow"),
    "swanlab": ("swanlab", "swanlab"),
    "trackio": ("trackio", "trackio"),
}


def missing_backend_packages(backends: Iterable[str]) -> list[str]:
    """One message per chosen backend whose package is not importable here, naming what installs it."""
    problems = []
    for backend in backends:
        if backend not in BACKEND_PACKAGES:
            continue
        module, extra = BACKEND_PACKAGES[backend]
        if importlib.util.find_spec(module) is None:
            install = f'pip install -e ".[{extra}]"' if extra else 'pip install -e ".[cpu]" (the default install)'
            problems.append(f"key 'tracking.backends': backend {backend!r} needs the package {module!r}, which is "
                            f"not installed; install it with `{install}` or remove {backend!r}")
    return problems


@dataclass(frozen=True)
class TrackingSettings:
    """Where and how one run is tracked: config ``tracking`` plus the run's id in the plan (its experiment name)."""

    backends: tuple[str, ...]
    dir: str  # root of the local file store (TensorBoard event files)
    project: str
    experiment: str  # the run's id in the plan: <task>/<name>/seed<k>

    @classmethod
    def for_run(cls, config: Mapping[str, Any], run_key: str) -> TrackingSettings:
        tracking = config["tracking"]
        return cls(tuple(tracking["backends"]), tracking["dir"], tracking["project"], run_key)

    def run_dir(self) -> Path:
        """This run's directory of the local file store."""
        return Path(self.dir) / self.experiment

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    def verl_loggers(self) -> list[str]:
        """verl's ``trainer.logger``: the chosen backends plus ``console`` (the job log) and ``file`` (which a verl
        training job turns into ``metrics.jsonl``: :func:`pipeline_lib.jobs.engines.verl.runner.write_metrics`)."""
        return list(dict.fromkeys(["console", "file", *self.backends]))


def tracking_from_json(text: str | None) -> TrackingSettings | None:
    if not text:
        return None
    data = json.loads(text)
    return TrackingSettings(tuple(data["backends"]), data["dir"], data["project"], data["experiment"])


def _scalars(record: Mapping[str, Any]) -> dict[str, float]:
    """The record's finite numbers (not ``step``); lists and strings are not curves."""
    return {key: float(value) for key, value in record.items()
            if key != "step" and isinstance(value, int | float) and not isinstance(value, bool)
            and math.isfinite(value)}


class _TensorBoard:
    """TensorBoard event files of one run; a (re)start removes the old files, the history is replayed into one."""

    def __init__(self, settings: TrackingSettings) -> None:
        with hidden_package("boto3"):  # tensorboardX imports it for s3:// log dirs; ours are local paths (~0.1 CPU s)
            from tensorboardX import SummaryWriter

        directory = settings.run_dir()
        if directory.exists():
            for old in directory.glob("events.out.tfevents.*"):
                old.unlink()
        directory.mkdir(parents=True, exist_ok=True)
        self.writer = SummaryWriter(str(directory), flush_secs=3600)  # flushed once per step, below

    def log(self, data: dict[str, float], step: int) -> None:
        for key, value in data.items():
            self.writer.add_scalar(key, value, step)
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


class _Console:
    """One line per step in the job log (verl's ``console`` backend prints the same)."""

    replays = False

    def log(self, data: dict[str, float], step: int) -> None:
        log.info("step %d: %s", step, " - ".join(f"{k}:{v:.4g}" for k, v in data.items()))

    def close(self) -> None:
        pass


class _Wandb:
    def __init__(self, settings: TrackingSettings) -> None:
        import wandb

        Path(settings.dir).mkdir(parents=True, exist_ok=True)
        self.run = wandb.init(project=settings.project, name=settings.experiment, dir=settings.dir,
                              entity=env("WANDB_ENTITY"))

    def log(self, data: dict[str, float], step: int) -> None:
        self.run.log(data, step=step)

    def close(self) -> None:
        self.run.finish()


def mlflow_key(key: str) -> str:
    r"""A metric name as MLflow accepts it, by verl's rule (``_MlflowLoggingAdapter``): ``@`` -> ``_at_``, repeated
    slashes -> one, any other character outside ``[/\w.\- :]`` -> ``_`` (``val_pass@1`` -> ``val_pass_at_1``)."""
    return re.sub(r"[^/\w.\- :]", "_", re.sub(r"/+", "/", key.replace("@", "_at_")))


class _Mlflow:
    """verl's settings: ``MLFLOW_TRACKING_URI`` (default ``sqlite:////tmp/mlruns.db``, a local file), project =
    experiment. Writes through an explicit client and run id (no process-global active run)."""

    def __init__(self, settings: TrackingSettings) -> None:
        from mlflow.tracking import MlflowClient

        self.client = MlflowClient(env("MLFLOW_TRACKING_URI") or "sqlite:////tmp/mlruns.db")
        experiment = self.client.get_experiment_by_name(settings.project)
        experiment_id = (experiment.experiment_id if experiment is not None
                         else self.client.create_experiment(settings.project))
        self.run_id = self.client.create_run(experiment_id, run_name=settings.experiment).info.run_id

    def log(self, data: dict[str, float], step: int) -> None:
        from mlflow.entities import Metric

        stamp = int(time.time() * 1000)
        self.client.log_batch(self.run_id, metrics=[Metric(mlflow_key(k), v, stamp, step) for k, v in data.items()])

    def close(self) -> None:
        self.client.set_terminated(self.run_id)


class _Swanlab:
    """verl's settings and call: ``SWANLAB_LOG_DIR`` (default ``swanlog``), ``SWANLAB_MODE`` (default ``cloud``,
    which needs an account; ``offline`` writes only the local log directory, ``swanlab sync`` uploads it)."""

    def __init__(self, settings: TrackingSettings) -> None:
        import swanlab

        swanlab.init(project=settings.project, experiment_name=settings.experiment,
                     logdir=env("SWANLAB_LOG_DIR") or "swanlog", mode=env("SWANLAB_MODE") or "cloud")
        self.swanlab = swanlab

    def log(self, data: dict[str, float], step: int) -> None:
        self.swanlab.log(data, step=step)

    def close(self) -> None:
        self.swanlab.finish()


class _Trackio:
    """verl's call: a local SQLite store per project under ``TRACKIO_DIR`` (default
    ``~/.cache/huggingface/trackio``); ``trackio show`` opens it."""

    def __init__(self, settings: TrackingSettings) -> None:
        import trackio

        trackio.init(project=settings.project, name=settings.experiment)
        self.trackio = trackio

    def log(self, data: dict[str, float], step: int) -> None:
        self.trackio.log(data, step=step)

    def close(self) -> None:
        self.trackio.finish()


_WRITERS = {"tensorboard": _TensorBoard, "wandb": _Wandb, "mlflow": _Mlflow, "swanlab": _Swanlab, "trackio": _Trackio}


class Tracker:
    """The local engine's writer to the chosen backends; ``file`` is ``metrics.jsonl`` itself
    (:class:`pipeline_lib.core.checkpoint.MetricsLog`).

    ``history`` (the records kept on resume, steps up to the checkpoint) is written first: the file store is
    rebuilt from it, and a backend that starts a new run per attempt (wandb, mlflow...) gets the whole curve in it.
    """

    def __init__(self, settings: TrackingSettings, history: Iterable[Mapping[str, Any]] = ()) -> None:
        self.writers: list[Any] = []
        try:
            for backend in dict.fromkeys(settings.backends):
                if backend == "console":
                    self.writers.append(_Console())
                elif backend in _WRITERS:
                    self.writers.append(_WRITERS[backend](settings))
                elif backend != "file":
                    raise ValueError(f"unknown tracking backend {backend!r} (known: {list(BACKENDS)})")
            for record in history:
                self.log(record, replay=True)
        except BaseException:
            self.close()
            raise

    def log(self, record: Mapping[str, Any], replay: bool = False) -> None:
        data, step = _scalars(record), int(record["step"])
        for writer in self.writers:
            if not (replay and not getattr(writer, "replays", True)):
                writer.log(data, step)

    def close(self) -> None:
        for writer in self.writers:
            writer.close()
        self.writers = []

