"""Transfer benchmarks of the OpenThoughts run through the libraries the field uses (never reimplemented).

    python -m pipeline_lib.jobs.eval.harness lm-eval --model DIR --spec JSON --seed 0 --out .../lm_eval.json
    python -m pipeline_lib.jobs.eval.harness alpaca-eval --model DIR --spec JSON --seed 0 --method sft
        --out .../alpaca_eval.json

* ``lm-eval``: EleutherAI lm-evaluation-harness ``simple_evaluate`` (MMLU, GPQA...) with the model backend and
  arguments from config (``vllm`` on GPU, ``hf`` on CPU), once per few-shot count (``num_fewshot``: task -> count;
  the authors' EVALUATION.md runs MMLU 5-shot and GPQA main 0-shot as two commands); the output keeps every task's
  metrics, its few-shot count, the harness version, task versions and the exact settings.
* ``alpaca-eval``: the checkpoint answers AlpacaEval's instructions through the pipeline's generation backends
  (greedy) as the authors' ``softmaxgrpo/evaluate.py`` does: their system prompt, their length cap and context
  length, each answer cut to its final text (:func:`~pipeline_lib.core.rewards.extract.final_text`, the cut r_sim
  makes) before ``alpaca_eval evaluate`` scores them with its configured annotator; the output keeps the
  length-controlled win rate (the reported number), the raw win rate and the library version.
  On a cluster the two halves run apart:
  ``alpaca-eval-generate`` writes the answers on a GPU node (offline), ``alpaca-eval --outputs FILE`` annotates
  them on the submit host, the one place with outbound access for the annotator's API (workflow/rules/eval.smk).
  The instructions are AlpacaEval's own ``eval`` set, ``alpaca_eval.json`` of the fetched ``tatsu-lab/alpaca_eval``
  (read from the hub cache, offline), unless ``instructions`` names a local file.
"""

from __future__ import annotations

import importlib.metadata
import json
import logging
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from pipeline_lib.core.cli import add_seed_argument, add_spec_argument, entry_parser, json_text
from pipeline_lib.core.io import write_json
from pipeline_lib.core.provenance import write_provenance
from pipeline_lib.core.rewards.extract import final_text
from pipeline_lib.jobs.eval.backends import open_backend

__all__ = ["alpaca_eval", "alpaca_generation_spec", "alpaca_prompts", "fewshot_groups", "lm_eval_results",
           "run_lm_eval"]

log = logging.getLogger("pipeline_lib.jobs.eval.harness")


def _model_args(model_dir: Path, extra: dict[str, Any]) -> dict[str, Any]:
    return {"pretrained": str(model_dir), **extra}


def lm_eval_results(raw: dict[str, Any], tasks: list[str]) -> dict[str, dict[str, float]]:
    """``{task: {metric: value}}`` for the requested tasks (groups such as ``mmlu`` included), numbers only."""
    results = raw.get("groups", {}) | raw["results"]
    missing = [t for t in tasks if t not in results]
    if missing:
        raise KeyError(f"lm-eval returned no results for task(s) {missing}; got {sorted(results)}")
    return {task: {k: v for k, v in results[task].items() if isinstance(v, int | float) and not isinstance(v, bool)}
            for task in tasks}


def fewshot_groups(tasks: list[str], num_fewshot: dict[str, int | None] | None) -> list[tuple[int | None, list[str]]]:
    """The tasks grouped by their few-shot count (a task absent from ``num_fewshot``, or null there, takes its own
    default: None), in first-listed order: one lm-eval call per group. A count for a task not run is an error (a
    misspelt task would silently run at its default)."""
    counts = dict(num_fewshot or {})
    stray = sorted(set(counts) - set(tasks))
    if stray:
        raise ValueError(f"eval.transfer.lm_eval.num_fewshot names task(s) {stray} that are not in tasks {tasks}")
    groups: dict[int | None, list[str]] = {}
    for task in tasks:
        groups.setdefault(counts.get(task), []).append(task)
    return list(groups.items())


def run_lm_eval(model_dir: Path, spec: dict[str, Any], seed: int) -> dict[str, Any]:
    import lm_eval
    from lm_eval.tasks import TaskManager

    task_manager = TaskManager(include_path=spec.get("include_path") or None)
    results: dict[str, dict[str, float]] = {}
    versions: dict[str, Any] = {}
    n_samples: dict[str, Any] = {}
    n_shot: dict[str, Any] = {}
    fewshot: dict[str, int | None] = {}
    for count, tasks in fewshot_groups(spec["tasks"], spec.get("num_fewshot")):
        raw = lm_eval.simple_evaluate(
            model=spec["model"], model_args=_model_args(model_dir, spec.get("model_args", {})), tasks=tasks,
            num_fewshot=count, batch_size=spec.get("batch_size", "auto"), limit=spec.get("limit"),
            apply_chat_template=spec.get("apply_chat_template", False), task_manager=task_manager, log_samples=False,
            random_seed=seed, numpy_random_seed=seed, torch_random_seed=seed, fewshot_random_seed=seed)
        if raw is None:  # a non-zero rank in a distributed run
            raise RuntimeError("lm-eval returned no results on this process")
        results |= lm_eval_results(raw, tasks)
        versions |= raw.get("versions", {})
        n_samples |= raw.get("n-samples", {})
        n_shot |= raw.get("n-shot", {})
        fewshot |= dict.fromkeys(tasks, count)
    return {"harness": "lm-evaluation-harness", "version": importlib.metadata.version("lm_eval"),
            "settings": {k: v for k, v in spec.items()}, "seed": seed, "num_fewshot": fewshot,
            "n_shot": n_shot, "results": results, "task_versions": versions, "n_samples": n_samples}


def alpaca_prompts(instructions: list[str], system_prompt: str) -> list[list[dict[str, str]]]:
    """One chat per instruction: the authors' system message, then the instruction as the user's turn."""
    return [[{"role": "system", "content": system_prompt}, {"role": "user", "content": text}] for text in instructions]


def alpaca_generation_spec(spec: dict[str, Any], eval_spec: dict[str, Any]) -> dict[str, Any]:
    """The generation backend's settings for AlpacaEval: config ``eval`` with the benchmark's own length cap and
    context length (``eval.transfer.alpaca_eval``: the authors' 6,144 and 16,384)."""
    return {**eval_spec, "max_new_tokens": int(spec["max_new_tokens"]),
            "vllm": {**(eval_spec.get("vllm") or {}), "max_model_len": int(spec["max_model_len"])}}


def instructions_file(spec: dict[str, Any]) -> Path:
    """The AlpacaEval instructions a run answers: ``spec["instructions"]`` when it names a file, else the hub file
    the plan names in ``spec["instructions_hub"]`` (``alpaca_eval.json`` of ``tatsu-lab/alpaca_eval``: a dataset
    repository and a file in it), from the hub cache offline (`fetch` put it there)."""
    if spec.get("instructions"):
        return Path(spec["instructions"])
    if not spec.get("instructions_hub"):
        raise KeyError("eval.transfer.alpaca_eval: no `instructions` file and no `instructions_hub` in the spec")
    from huggingface_hub import hf_hub_download

    hub = spec["instructions_hub"]
    return Path(hf_hub_download(hub["repo"], hub["file"], repo_type="dataset", local_files_only=True))


def alpaca_eval(model_dir: Path, spec: dict[str, Any], eval_spec: dict[str, Any], seed: int, work_dir: Path,
                method: str) -> dict[str, Any]:
    """Generate answers to the AlpacaEval set with our backend, then run the ``alpaca_eval`` CLI on them. The
    leaderboard names them ``generator_name``, or else ``method`` (the run's method, handed over by the rule)."""
    outputs_path = alpaca_generate(model_dir, spec, eval_spec, seed, work_dir / "model_outputs.json", method)
    return alpaca_annotate(outputs_path, spec, seed, work_dir)


def alpaca_generate(model_dir: Path, spec: dict[str, Any], eval_spec: dict[str, Any], seed: int, out: Path,
                    method: str) -> Path:
    """The checkpoint's answers to the AlpacaEval instructions, as ``alpaca_eval``'s model outputs file ``out``."""
    import pandas as pd

    source = instructions_file(spec)
    instructions = pd.read_json(source, lines=str(source).endswith(".jsonl"))
    if "instruction" not in instructions:
        raise KeyError(f"{source}: no 'instruction' column")
    if spec.get("limit") is not None:  # the schema's minimum 1: 0 or a negative number is never "all"
        instructions = instructions.iloc[: spec["limit"]]
    prompts = alpaca_prompts(list(instructions["instruction"]), spec["system_prompt"])
    with open_backend(model_dir, alpaca_generation_spec(spec, eval_spec), seed, out.parent) as backend:
        outputs = backend.generate(prompts, samples=1, greedy=True)
    generator = spec.get("generator_name") or method
    raw_path = out.parent / "raw_outputs.json"  # the whole replies, thinking included, for reading
    write_json(raw_path, [answer[0].text for answer in outputs])
    model_outputs = [{"instruction": text, "output": final_text(answer[0].text), "generator": generator,
                      "dataset": row.get("dataset", "alpaca_eval")}
                     for text, answer, (_, row) in zip(instructions["instruction"], outputs, instructions.iterrows(),
                                                    strict=True)]
    write_json(out, model_outputs)
    return out


def alpaca_annotate(outputs_path: Path, spec: dict[str, Any], seed: int, work_dir: Path) -> dict[str, Any]:
    """``alpaca_eval evaluate`` of a model outputs file with the configured annotator (its API: online)."""
    import pandas as pd

    model_outputs = json.loads(outputs_path.read_text())
    generator = model_outputs[0]["generator"] if model_outputs else spec.get("generator_name")
    command = [sys.executable, "-m", "alpaca_eval.main", "evaluate", f"--model_outputs={outputs_path}",
               f"--annotators_config={spec['annotators_config']}", f"--output_path={work_dir}"]
    log.info("running %s", " ".join(command))
    subprocess.run(command, check=True)
    # alpaca_eval writes under <output_path>/<annotators_config>/ for a named config, <output_path>/ for a path
    named = "/" not in spec["annotators_config"]
    leaderboard = pd.read_csv(work_dir / (spec["annotators_config"] if named else "") / "leaderboard.csv",
                              index_col=0)
    row = leaderboard.loc[generator]
    return {"harness": "alpaca_eval", "version": importlib.metadata.version("alpaca_eval"),
            "settings": dict(spec), "seed": seed, "instructions": len(model_outputs),
            "answers": "final text (after the last </think>, the last <answer> span if any)",
            "results": {"length_controlled_winrate": float(row["length_controlled_winrate"]),
                        "win_rate": float(row["win_rate"]), "avg_length": float(row["avg_length"])}}


def main(argv: list[str] | None = None) -> int:
    parser = entry_parser(__doc__, "pipeline_lib.jobs.eval.harness")
    parser.add_argument("benchmark", choices=["lm-eval", "alpaca-eval", "alpaca-eval-generate"])
    parser.add_argument("--model", type=Path, default=None, help="the checkpoint (all but alpaca-eval --outputs)")
    add_spec_argument(parser, "config `eval.transfer.<benchmark>`")
    parser.add_argument("--eval-spec", default="{}", type=json_text,
                        help="JSON of config `eval` (generation backend; alpaca-eval)")
    add_seed_argument(parser, required=False)
    parser.add_argument("--method", default=None,
                        help="the run's method: its leaderboard name unless generator_name is set (alpaca-eval)")
    parser.add_argument("--outputs", type=Path, default=None,
                        help="alpaca-eval: annotate this model outputs file (from alpaca-eval-generate) instead of "
                             "generating")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    if args.model is None and args.outputs is None:
        parser.error(f"{args.benchmark}: --model is required")
    started = time.time()
    spec = json.loads(args.spec)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    if args.benchmark == "lm-eval":
        result = run_lm_eval(args.model, spec, args.seed)
        inputs = [args.model / "config.json"]
    elif args.outputs is not None:  # the annotation half (a local rule: the annotator's API is online)
        result = alpaca_annotate(args.outputs, spec, args.seed, args.out.parent)
        inputs = [args.outputs]
    else:
        if not (spec.get("generator_name") or args.method):
            parser.error("alpaca-eval: --method is required when eval.transfer.alpaca_eval.generator_name is null")
        if args.benchmark == "alpaca-eval-generate":
            alpaca_generate(args.model, spec, json.loads(args.eval_spec), args.seed, args.out, args.method)
            write_provenance([args.out], step="eval_alpaca_generate", inputs=[args.model / "config.json",
                                                                             instructions_file(spec)],
                             params={"spec": spec}, seeds={"eval": args.seed}, started_at=started)
            return 0
        result = alpaca_eval(args.model, spec, json.loads(args.eval_spec), args.seed, args.out.parent, args.method)
        inputs = [args.model / "config.json", instructions_file(spec)]
    write_json(args.out, result)
    write_provenance([args.out], step=f"eval_{args.benchmark.replace('-', '_')}", inputs=inputs,
                     params={"spec": spec}, seeds={"eval": args.seed}, started_at=started)
    log.info("%s: %s", args.benchmark, result["results"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
