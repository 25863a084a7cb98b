"""Pipeline run spec -> Hydra overrides: the grammar and what every verl run's overrides share, and an SFT run's own
(``torchrun -m verl.trainer.sft_trainer``).

Apart from :mod:`.translate` (the RL overrides, which name the estimators' and the reward hook's modules, which verl's
workers load), so the verl SFT entry point (:mod:`.sft`) imports no RL code and its code digest covers none: an edit of
the advantage estimators reruns no SFT job (issue 58). Plain Python, no verl import, no plan import.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

from pipeline_lib.core.run_spec import RunSpec, VerlSFTKnobs
from pipeline_lib.jobs.engines.verl.paths import TrainPaths, checkpoint_dir

__all__ = ["ATTENTION", "PROJECT", "done_kind", "experiment_name", "hydra_value", "sft_overrides", "to_overrides",
           "tracking_env", "tracking_overrides"]

PROJECT = "softmaxgrpo"
#: The attention of verl's FSDP actor/reference/SFT models (verl 0.9.1 defaults to ``flash_attention_2``,
#: verl/workers/config/model.py:185). PyPI's flash-attn is source-only (no wheel for any release, 2.8.3 included), and
#: no official wheel exists for torch 2.11 (the locked torch, a CUDA 13.0 build): it would need nvcc and a long
#: compile on the cluster. ``sdpa`` is torch's own and gives the same results: with ``use_remove_padding`` verl packs a
#: micro-batch into one row with per-sequence position ids, verl's unpad/pad fall back to torch
#: (verl/utils/attention_utils.py) and transformers builds a block-diagonal causal mask from the position ids
#: (tests/jobs/test_locks.py checks it equals per-sequence attention). The cost: with that mask torch's SDPA cannot take
#: its flash kernel, and the memory-efficient one computes the whole packed row, about 2 x micro-batch times
#: FA2-varlen's attention FLOPs (sequences of equal length), plus a (tokens x tokens) mask per forward. The rollout
#: (vLLM) is unaffected: vLLM ships its own attention kernels.
ATTENTION = "sdpa"
_SAFE = re.compile(r"^[A-Za-z0-9_./~+@-]+$")


def hydra_value(value: Any) -> str:
    """A Python value in Hydra's override grammar (strings quoted unless plainly safe)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"non-finite value {value!r} cannot be a verl override")
        return repr(value)
    if isinstance(value, str):
        if _SAFE.match(value) and value.lower() not in ("true", "false", "null") and not _is_number(value):
            return value
        return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
    if isinstance(value, Mapping):
        return "{" + ",".join(f"{k}:{hydra_value(v)}" for k, v in value.items()) + "}"
    if isinstance(value, Sequence):
        return "[" + ",".join(hydra_value(v) for v in value) + "]"
    raise TypeError(f"cannot express {type(value).__name__} {value!r} as a Hydra override")


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def to_overrides(pairs: Mapping[str, Any]) -> list[str]:
    """``key=value`` overrides, each value in Hydra's grammar (:func:`hydra_value`)."""
    return [f"{key}={hydra_value(value)}" for key, value in pairs.items()]


def done_kind(kind: str, spec: RunSpec) -> str:
    """The ``kind`` a verl run's ``DONE.json`` records, read from its spec: a group-RL run (it trains on a reward) is
    ``rl``; any other run is named by its method (SFT's is ``sft``; a baseline's, as the local engine's, its name)."""
    return "rl" if spec.reward is not None and kind == "rl" else spec.method


def experiment_name(spec: RunSpec, seed: int) -> str:
    return f"{spec.task}-{spec.method}-seed{seed}"


def tracking_overrides(spec: RunSpec, paths: TrainPaths, seed: int) -> dict[str, Any]:
    """verl's ``trainer.logger`` (config ``tracking.backends`` + console + file) and its names: the project, and the
    run's id in the plan as the experiment."""
    tracking = paths.tracking
    if tracking is None:
        return {"trainer.logger": ["console", "file"], "trainer.project_name": PROJECT,
                "trainer.experiment_name": experiment_name(spec, seed)}
    return {"trainer.logger": tracking.verl_loggers(), "trainer.project_name": tracking.project,
            "trainer.experiment_name": tracking.experiment}


def tracking_env(paths: TrainPaths) -> dict[str, str]:
    """Where verl's ``tensorboard`` backend writes: the run's directory of the local store (``TENSORBOARD_DIR``)."""
    if paths.tracking is None:
        return {}
    return {"TENSORBOARD_DIR": str(paths.tracking.run_dir().resolve())}


def sft_overrides(spec: RunSpec, paths: TrainPaths, seed: int) -> list[str]:
    """Overrides for ``torchrun -m verl.trainer.sft_trainer`` (verl's ``sft_trainer_engine`` config)."""
    sft = spec.sft
    if sft is None or not isinstance(sft.knobs, VerlSFTKnobs):
        raise ValueError(f"run spec {spec.task}/{spec.method}: no verl SFT settings (engine {spec.engine!r})")
    pairs: dict[str, Any] = {
        "data.train_files": str(paths.train_files),
        "data.val_files": None,
        "data.messages_key": "messages",
        "data.train_batch_size": sft.batch_size,
        "data.micro_batch_size_per_gpu": sft.knobs.micro_batch_per_gpu,
        "data.max_length": sft.knobs.max_length,
        "data.truncation": sft.knobs.truncation,
        "model.path": spec.model,
        "model.enable_gradient_checkpointing": True,
        "model.use_remove_padding": True,
        "+model.override_config.attn_implementation": ATTENTION,
        "optim.lr": float(sft.lr),
        "optim.weight_decay": float(sft.weight_decay),
        "optim.lr_warmup_steps_ratio": float(sft.knobs.warmup_ratio),
        "trainer.total_training_steps": sft.steps,
        "trainer.total_epochs": 1000,
        "trainer.n_gpus_per_node": sft.knobs.gpus_per_node,
        "trainer.nnodes": 1,
        "trainer.save_freq": sft.checkpoint_every,
        "trainer.test_freq": -1,
        "trainer.resume_mode": "auto",
        "trainer.default_local_dir": str(checkpoint_dir(paths.run_dir)),
        "trainer.max_ckpt_to_keep": 2,
        **tracking_overrides(spec, paths, seed),
        "trainer.seed": seed,
    }
    return to_overrides(pairs) + list(spec.extra_overrides)
