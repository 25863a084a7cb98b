"""CPU seconds a default run's processes spend starting: a model process's imports, and the run's record of its job
graph, each the way it was (before) and the way it is (after), side by side in one run.

Run: python benchmarks/startup.py [--repeats 3] [--no-dag]

Imports: a tiny task's data job imported torch with the ImageNet validator it does not call. Every language-model
process of the default run (train_local, train_local_group, train_ablation_group, eval_checkpoints_*) imports its
entry module, then transformers' tokenizer and model classes and tensorboardX. "before" imports them in a fresh
interpreter with scikit-learn visible to transformers and boto3 to accelerate (as every process did: the generation
code imports ``sklearn.metrics``, accelerate boto3), "after" with :mod:`pipeline_lib.core.model` imported first (which
hides them from those checks). Job graph: "before" is the second ``snakemake --dag -n all`` that ``run_info`` ran in
a subprocess at the start of each run; "after" it writes ``workflow.dag.dot()`` of the running workflow, which costs
no new process (not timed here: formatting a graph already built). Each figure is the minimum over ``--repeats``
fresh processes (user + system CPU of the child), so a shared machine's noise inflates it least.
"""

from __future__ import annotations

import argparse
import resource
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

#: What one model process imports (its entry module, then what it loads lazily when it runs).
ENTRY_MODULES = ("pipeline_lib.jobs.engines.local.rl", "pipeline_lib.jobs.engines.local.sft",
                 "pipeline_lib.jobs.eval.evaluate",
                 "pipeline_lib.jobs.engines.local.batch")
MODEL_IMPORTS = "from transformers import AutoTokenizer, AutoModelForCausalLM, DynamicCache; "
TENSORBOARD_BEFORE = "from tensorboardX import SummaryWriter"
# what pipeline_lib.core.tracking's TensorBoard writer does now
TENSORBOARD_AFTER = ("from pipeline_lib.core.env import hidden_package\n"
                     "with hidden_package('boto3'): from tensorboardX import SummaryWriter\n")
# "before": what the process imported when transformers still found scikit-learn (the model module's import, with
# its hiding undone first, so the entry modules load exactly as they do now)
BEFORE = ("import sys, importlib.util; import torch; "
          "from transformers.utils import import_utils; import_utils.is_sklearn_available(); "
          "import accelerate.commands.config; ")
AFTER = "import pipeline_lib.core.model; "

#: Language-model processes per default run (c368181's results/benchmarks/: 19 train_local, 6 train_local_group, 1
#: train_ablation_group, 7 eval_checkpoints_*).
DEFAULT_RUN_MODEL_PROCESSES = 19 + 6 + 1 + 7
#: data_tiny jobs per default run (one per tiny task).
DEFAULT_RUN_TINY_DATA_JOBS = 3


def child_cpu(args: list[str], repeats: int) -> float:
    """Minimum over ``repeats`` runs of the child's user + system CPU seconds."""
    best = float("inf")
    for _ in range(repeats):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        subprocess.run(args, cwd=REPO, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        best = min(best, (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime))
    return best


def imports_code(prefix: str) -> str:
    """One process's imports; it fails unless sklearn was imported before and not after."""
    expected = "True" if prefix == BEFORE else "False"
    tensorboard = TENSORBOARD_BEFORE + "\n" if prefix == BEFORE else TENSORBOARD_AFTER
    return (prefix + "".join(f"import {m}; " for m in ENTRY_MODULES) + MODEL_IMPORTS + "\n" + tensorboard
            + f"assert ('sklearn' in sys.modules) == ('boto3' in sys.modules) == {expected}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--no-dag", action="store_true", help="skip the snakemake --dag measurement (~5 CPU s each)")
    args = parser.parse_args(argv)

    rows = []
    before = child_cpu([sys.executable, "-c", imports_code(BEFORE)], args.repeats)
    after = child_cpu([sys.executable, "-c", "import sys; " + imports_code(AFTER)], args.repeats)
    rows.append(("imports of one model process", before, after))
    # a tiny task's data job (data_tiny): data.build imported the ImageNet validator, and torch with it, up front
    data_before = child_cpu([sys.executable, "-c",
                             "import pipeline_lib.core.data.imagenet, pipeline_lib.core.data.build"],
                            args.repeats)
    light = "import sys, pipeline_lib.core.data.build; assert 'torch' not in sys.modules"
    data_after = child_cpu([sys.executable, "-c", light], args.repeats)
    rows.append(("imports of one data_tiny job", data_before, data_after))
    if not args.no_dag:
        dag = child_cpu([sys.executable, "-m", "snakemake", "--dag", "-n", "--quiet", "--nolock", "all"], args.repeats)
        rows.append(("run_info's job graph (once per run)", dag, 0.0))
    header = f"CPU s (min of {args.repeats})"
    print(f"{header:40s} {'before':>8s} {'after':>8s} {'saved':>8s} {'after/before':>13s}")
    for name, b, a in rows:
        print(f"{name:40s} {b:8.2f} {a:8.2f} {b - a:8.2f} {a / b:13.2f}")
    saved = [b - a for _, b, a in rows]
    counts = [DEFAULT_RUN_MODEL_PROCESSES, DEFAULT_RUN_TINY_DATA_JOBS, 1][:len(rows)]
    total = sum(n * s for n, s in zip(counts, saved, strict=True))
    terms = " + ".join(f"{n} x {s:.2f}" for n, s in zip(counts, saved, strict=True))
    print(f"per default run (model processes, data_tiny jobs, job graph): {terms} = {total:.0f} CPU s saved")
    return 0


if __name__ == "__main__":
    sys.exit(main())
