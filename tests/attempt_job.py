"""A job for tests/core/test_attempts.py: guarded like the long training jobs; fails, is cut like a time limit, or
succeeds, as told per attempt. ``python -m tests.attempt_job RUN_DIR ACTION[,ACTION...]`` (action of attempt k)."""

import os
import signal
import sys
import time
from pathlib import Path

from pipeline_lib.core.attempts import guard_attempt

if __name__ == "__main__":
    run_dir, actions = Path(sys.argv[1]), sys.argv[2].split(",")
    attempt = int(os.environ.get("SOFTMAXGRPO_ATTEMPT", "1"))
    with guard_attempt(run_dir):
        with (run_dir / "bodies.txt").open("a") as log:
            log.write(f"{attempt}\n")
        action = actions[min(attempt, len(actions)) - 1]
        if action == "fail":
            raise RuntimeError("NCCL timeout (a broken interconnect)")
        if action == "timeout":
            os.kill(os.getpid(), signal.SIGTERM)  # what Slurm sends at the time limit
            time.sleep(30)
        if action == "sigkill":
            os.kill(os.getpid(), signal.SIGKILL)
        (run_dir / "DONE.json").write_text("{}")
