"""Train one (objective, group_size, seed) run of the objective study; resumable.

    python -m pipeline_lib.jobs.classify.train --spec JSON --objective softmax --group-size 64 --seed 0 \
        --run-dir results/train/imagenet/softmax/m64/seed0

Writes ``metrics.jsonl`` (one line per evaluation), ``checkpoint.pt`` every
``checkpoint_every`` steps (model, optimizer, scheduler, RNG, step), and at the final step
``final.pt`` (the model's state dict) and ``DONE.json``. A killed run restarts from its
checkpoint and ends at the same step; a finished run's checkpoint is removed. With ``--tracking`` every
``metrics.jsonl`` record also goes to the run's tracking backends as it is written (``docs/tracking.md``).
"""

from __future__ import annotations

import logging
import math
import random
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader
from tqdm import tqdm

from pipeline_lib.core.attempts import guard_attempt
from pipeline_lib.core.checkpoint import (
    MetricsLog,
    claim_run_dir,
    load_checkpoint,
    rng_state,
    run_identity,
    save_checkpoint,
    set_rng_state,
    write_done,
)
from pipeline_lib.core.cli import add_run_arguments, entry_parser
from pipeline_lib.core.data.imagenet import EpochSampler, SplitData, build_splits
from pipeline_lib.core.io import atomic_path
from pipeline_lib.core.provenance import config_digest, write_provenance
from pipeline_lib.core.rl.estimators import check_params
from pipeline_lib.core.run_spec import ImageNetModel, ImageNetSettings, RunSpec
from pipeline_lib.core.tracking import TrackingSettings
from pipeline_lib.jobs.classify.objectives import ML, OBJECTIVES, closed_form_metrics, objective_loss

log = logging.getLogger("pipeline_lib.jobs.classify.train")


def build_model(model: ImageNetModel, data: SplitData) -> nn.Module:
    if model.kind == "mlp":
        return nn.Sequential(nn.Linear(data.input_shape[0], model.hidden), nn.ReLU(),
                             nn.Linear(model.hidden, data.n_classes))
    if model.kind == "resnet50":
        from torchvision.models import resnet50  # GPU environment only

        return resnet50(weights=None, num_classes=data.n_classes)
    raise ValueError(f"unknown model kind {model.kind!r}")


def lr_factor(step: int, warmup_steps: int, total_steps: int) -> float:
    """Linear warm-up then cosine decay to zero."""
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    progress = (step - warmup_steps) / max(1, total_steps - warmup_steps)
    return 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))


@torch.no_grad()
def evaluate(model: nn.Module, data: SplitData, spec: ImageNetSettings, device: torch.device) -> dict[str, float]:
    model.eval()
    loader = DataLoader(data.val, batch_size=spec.eval_batch_size, shuffle=False, num_workers=spec.num_workers)
    sums: dict[str, float] = {}
    count = 0
    for inputs, labels in loader:
        inputs, labels = inputs.to(device), labels.to(device)
        for name, values in closed_form_metrics(model(inputs), labels, spec.pass_k).items():
            sums[name] = sums.get(name, 0.0) + float(values.sum())
        count += labels.numel()
    model.train()
    return {f"val_{name}": total / count for name, total in sums.items()}


def _rng_state(generator: torch.Generator) -> dict[str, Any]:
    # "rollouts" names the label sampler's generator, not M (group_size); renaming it would break resuming checkpoints
    return rng_state() | {"rollouts": generator.get_state()}


def _restore_rng(state: dict[str, Any], generator: torch.Generator) -> None:
    set_rng_state(state)
    generator.set_state(state["rollouts"])


def train(spec: ImageNetSettings, seed: int, run_dir: Path, progress: bool = True,
          tracking: TrackingSettings | None = None, params: Mapping[str, Any] | None = None) -> Path:
    """One run of ``spec.objective`` with ``spec.group_size`` (M); ``params``: the RL objective's estimator parameters
    (its run spec's ``estimator.params``)."""
    objective, group_size = spec.objective, spec.group_size
    if objective not in OBJECTIVES:
        raise ValueError(f"unknown objective {objective!r}; choose from {OBJECTIVES}")
    params = dict(params or {})
    if objective != ML:
        check_params(objective, params)  # exactly its parameter dataclass's fields (softmax: tau), within bounds
    # the run's settings, objective, M and seed (and estimator parameters): the digest its checkpoint and DONE record
    run_config = {"spec": spec.run_settings(), "objective": objective, "group_size": group_size, "seed": seed,
                  **({"params": params} if params else {})}
    digest = config_digest(run_config)
    run_dir.mkdir(parents=True, exist_ok=True)
    # resume only this run's state: same config and code (the data are generated from the spec and seed)
    claim_run_dir(run_dir, run_identity({"config_sha256": digest}, []), "local")
    torch.manual_seed(seed)
    random.seed(seed)
    np.random.seed(seed)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    data = build_splits(spec.dataset)
    model = build_model(spec.model, data).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=spec.lr, momentum=spec.momentum,
                                weight_decay=spec.weight_decay)
    steps_per_epoch = len(data.train) // spec.batch_size
    total_steps = steps_per_epoch * spec.epochs
    warmup_steps = int(spec.warmup_epochs * steps_per_epoch)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: lr_factor(s, warmup_steps, total_steps))
    generator = torch.Generator(device=device).manual_seed(seed + 1)

    step = 0
    running: dict[str, float] = {}  # training metrics accumulated since the last evaluation
    state = load_checkpoint(run_dir, digest)
    metrics_path = run_dir / "metrics.jsonl"
    if state is not None:
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        _restore_rng(state["rng"], generator)
        step = state["step"]
        running = state["running"]
        log.info("resuming %s from step %d of %d", run_dir, step, total_steps)
    sampler = EpochSampler(len(data.train), seed)
    bar = tqdm(total=total_steps, initial=step, desc=f"{objective} M={group_size} seed={seed}", disable=not progress,
               file=sys.stderr)
    started = time.time()
    # cut back to the checkpoint, so a resumed log matches (a fresh start, which writes step 0, keeps nothing)
    metrics_file = MetricsLog(metrics_path, step if state is not None else -1, tracking)  # + live tracking
    try:
        if step == 0:
            metrics_file.write({"step": 0, "epoch": 0.0, **evaluate(model, data, spec, device)})
        while step < total_steps:
            epoch, offset = divmod(step, steps_per_epoch)
            sampler.set_position(epoch, offset * spec.batch_size)
            loader = DataLoader(data.train, batch_size=spec.batch_size, sampler=sampler, drop_last=True,
                                num_workers=spec.num_workers)
            for inputs, labels in loader:
                inputs, labels = inputs.to(device), labels.to(device)
                out = objective_loss(objective, model(inputs), labels, group_size, params, generator)
                optimizer.zero_grad(set_to_none=True)
                out.loss.backward()
                optimizer.step()
                scheduler.step()
                step += 1
                bar.update(1)
                for key, value in (("loss", float(out.loss.detach())), ("train_reward", out.reward_mean),
                                   ("train_groups_with_signal", out.groups_with_signal)):
                    running[key] = running.get(key, 0.0) + value
                running["n"] = running.get("n", 0) + 1
                if step % spec.eval_every == 0 or step == total_steps:
                    n = running.pop("n")
                    record = {"step": step, "epoch": step / steps_per_epoch, "lr": scheduler.get_last_lr()[0],
                              **{k: v / n for k, v in running.items()}, **evaluate(model, data, spec, device)}
                    running = {}
                    metrics_file.write(record)
                    bar.set_postfix(pass1=f"{record['val_pass@1']:.3f}", top1=f"{record['val_top1']:.3f}")
                if step % spec.checkpoint_every == 0 or step == total_steps:
                    save_checkpoint(run_dir, {"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                                              "scheduler": scheduler.state_dict(), "rng": _rng_state(generator),
                                              "step": step, "running": dict(running), "config_sha256": digest})
                if step == total_steps or step % steps_per_epoch == 0:
                    break
    finally:
        metrics_file.close()
    bar.close()
    final = run_dir / "final.pt"
    with atomic_path(final) as tmp:
        torch.save(model.state_dict(), tmp)
    done = write_done(run_dir, step=step, total_steps=total_steps, config_sha256=digest,
                      objective=objective, group_size=group_size, seed=seed, dataset=data.description)
    write_provenance([done, metrics_path, final], step="imagenet_train", params=run_config, config_sha256=digest,
                     seeds={"run": seed}, started_at=started)
    return done


def main(argv: list[str] | None = None) -> int:
    parser = entry_parser(__doc__, "pipeline_lib.jobs.classify.train")
    add_run_arguments(parser)
    parser.add_argument("--objective", required=True, choices=OBJECTIVES)
    parser.add_argument("--group-size", type=int, required=True,
                        help="M, labels sampled per image (the group size; ignored by ml)")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    spec = RunSpec.from_json(args.spec)
    if spec.estimator is not None and spec.estimator.name != args.objective:
        raise SystemExit(f"--objective {args.objective} but the spec's estimator is {spec.estimator.name!r}")
    settings = spec.imagenet
    if settings is None:
        raise SystemExit(f"the spec of {spec.task}/{spec.method} has no imagenet settings")
    if (settings.objective, settings.group_size) != (args.objective, args.group_size):
        raise SystemExit(f"--objective {args.objective} --group-size {args.group_size} but the spec's imagenet "
                         f"settings say objective {settings.objective!r}, group_size {settings.group_size}")
    with guard_attempt(args.run_dir):  # retries that fit the failure (pipeline_lib.core.attempts)
        train(settings, args.seed, args.run_dir, tracking=args.tracking,
              params=spec.estimator.params if spec.estimator else None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
