"""Process start-up vs work: K evaluations of the tiny default as K processes, then as one batched process.

Run: python benchmarks/batching.py [--evaluations 6]

Jobs of the tiny default each start Python with torch and transformers; this measures what one process per job
costs against one process for several jobs (``pipeline_lib.jobs.engines.local.batch``, which the group rules
``train_local_group``, ``train_ablation_group``, ``train_imagenet_group`` and ``eval_checkpoints_<task>_seed<N>``
use), side by side in one run. It builds countdown_tiny and
its tokenizer with the default config's settings, an untrained base model (what an evaluation costs does not
depend on the weights' values), then runs the default config's evaluation (``eval`` section: 200 prompts, 1 greedy
+ 4 samples) K times each way, with different seeds. CPU seconds are the kernel's accounting of the finished child
processes.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from pipeline_lib.core.config import load_config_file, validate_config
from pipeline_lib.plan.settings import base_spec, eval_spec, tiny_task_spec

REPO = Path(__file__).resolve().parents[1]

TASK = "countdown_tiny"


def timed(commands: list[list[str]], env: dict[str, str]) -> tuple[float, float]:
    """Wall and CPU seconds of running ``commands`` one after the other."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    for command in commands:
        subprocess.run(command, check=True, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--evaluations", type=int, default=6)
    args = parser.parse_args(argv)
    config = dict(validate_config(load_config_file(REPO / "config/config.yaml"),
                                  REPO / "workflow/schemas/config.schema.yaml"))
    env = os.environ | {"OMP_NUM_THREADS": "1"}  # the children run `python -m` in REPO, so they import its code
    python = sys.executable
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        data, tokenizer, model = root / "data" / TASK, root / "tokenizer", root / "base"
        timed([[python, "-m", "pipeline_lib.core.data.build", "tiny", "--task", TASK, "--spec",
                json.dumps(tiny_task_spec(config)), "--seed", "0", "--out-dir", str(data)],
               [python, "-m", "pipeline_lib.core.data.build", "tokenizer", "--inputs", str(data / "sft_train.parquet"),
                str(data / "rl_train.parquet"), "--vocab-size", str(config["data"]["tokenizer"]["vocab_size"]),
                "--out-dir", str(tokenizer)],
               [python, "-m", "pipeline_lib.jobs.engines.local.base", "--spec",
                base_spec(config, TASK, "base", "local").to_json(),
                "--tokenizer", str(tokenizer), "--run-dir", str(model), "--seed", "0"]], env)
        spec = json.dumps(eval_spec(config))

        def eval_args(seed: int, out: Path) -> list[str]:
            return ["--model", str(model / "final"), "--data", str(data / "rl_test.parquet"), "--spec", spec,
                    "--seed", str(seed), "--out", str(out / f"seed{seed}"), "--threads", "1"]

        seeds = range(args.evaluations)
        separate = timed([[python, "-m", "pipeline_lib.jobs.eval.evaluate", *eval_args(s, root / "separate")]
                          for s in seeds], env)
        steps = [{"module": "pipeline_lib.jobs.eval.evaluate", "args": eval_args(s, root / "batched")} for s in seeds]
        batched = timed([[python, "-m", "pipeline_lib.jobs.engines.local.batch", "--steps", json.dumps(steps)]], env)
        for seed in seeds:  # the same evaluations: identical scores either way
            a = json.loads((root / "separate" / f"seed{seed}" / "metrics.json").read_text())
            b = json.loads((root / "batched" / f"seed{seed}" / "metrics.json").read_text())
            if a != b:
                raise SystemExit(f"seed {seed}: batched evaluation differs from the separate one: {a} vs {b}")
    per_process = (separate[1] - batched[1]) / max(args.evaluations - 1, 1)
    print(f"{args.evaluations} evaluations of {TASK} (eval section of config/config.yaml), same results both ways")
    print(f"  one process each : {separate[0]:6.1f} s wall, {separate[1]:6.1f} s CPU")
    print(f"  one batch process: {batched[0]:6.1f} s wall, {batched[1]:6.1f} s CPU")
    print(f"  ratio separate / batched CPU: {separate[1] / batched[1]:.2f}x; start-up saved per process: "
          f"{per_process:.1f} CPU s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
