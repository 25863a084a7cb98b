"""verl's reward hook: the pipeline's reward registry, plus a record of every verifier item that timed out or failed.

verl's v1 trainer hands the reward function's extra keys (``timeouts``/``failures``) to neither its training rollout
dump (``trainer_base._log_rollout_data`` writes uid, input, output, gts, score, step) nor its training metrics, so
the hook writes them beside the run itself: each scored rollout whose verifier timed out or failed becomes one line
``{"key", "timeouts", "failures"}`` in ``$PIPELINE_REWARD_HEALTH_DIR/<host>-<pid>.jsonl`` (one file per process, a
lock per file, so the reward loop's threads and workers on any node never interleave a line). ``key`` digests the
decoded response and the ground truth, which the rollout dump also holds, so :mod:`.train` counts each step's
dumped rollouts that were recorded. Without the variable (tests, evaluation) the hook is the registry's
``compute_score`` unchanged.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import socket
import threading
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from pipeline_lib.core.env import env
from pipeline_lib.core.rewards import compute_score as registry_score
from pipeline_lib.core.rewards import health_counts
from pipeline_lib.jobs.engines.verl.translate import REWARD_HEALTH_ENV

__all__ = ["compute_score", "dumped_health", "read_health_records", "rollout_key"]

log = logging.getLogger("pipeline_lib.jobs.engines.verl.reward")
_lock = threading.Lock()


def rollout_key(solution: Any, ground_truth: Any) -> str:
    """A rollout's identity in both the reward call and verl's dump (decoded response, ground truth as dumped)."""
    text = json.dumps([solution, ground_truth], sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def compute_score(data_source: str, solution_str: str, ground_truth: Any, extra_info: Mapping[str, Any] | None = None,
                  reward_weights: Mapping[str, float] | None = None, **kwargs: Any) -> dict[str, float]:
    """verl custom reward entry point: :func:`pipeline_lib.core.rewards.compute_score`, its timeouts/failures
    recorded."""
    result = registry_score(data_source, solution_str, ground_truth, extra_info, reward_weights, **kwargs)
    directory = env(REWARD_HEALTH_ENV)
    counts = health_counts([result])
    if directory and any(counts.values()):
        line = json.dumps({"key": rollout_key(solution_str, ground_truth), **counts}) + "\n"
        path = Path(directory) / f"{socket.gethostname()}-{os.getpid()}.jsonl"
        with _lock:
            path.parent.mkdir(parents=True, exist_ok=True)
            with path.open("a") as handle:
                handle.write(line)
    return result


def read_health_records(directory: Path) -> dict[str, dict[str, int]]:
    """Every recorded key -> its timeouts and failures (the most recent record of a key wins)."""
    records: dict[str, dict[str, int]] = {}
    for path in sorted(directory.glob("*.jsonl")):
        text = path.read_text()
        lines = text.splitlines()
        if lines and not text.endswith("\n"):  # the last write of a killed worker: its rollout was never trained on
            log.warning("%s: ignoring an unfinished last line %r", path, lines.pop()[:80])
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
                records[str(record["key"])] = {"timeouts": int(record["timeouts"]), "failures": int(record["failures"])}
            except (ValueError, KeyError, TypeError) as exc:
                raise ValueError(f"{path}:{number}: not a reward health record ({exc})") from exc
    return records


def dumped_health(rows: Iterable[Mapping[str, Any]], records: Mapping[str, Mapping[str, int]]) -> dict[str, int]:
    """Timeouts and failures among a step's dumped rollouts, from the records of the reward calls that scored them."""
    counts = {"timeouts": 0, "failures": 0}
    for row in rows:
        record = records.get(rollout_key(row["output"], row.get("gts")))
        if record:
            for kind in counts:
                counts[kind] += record[kind]
    return counts
