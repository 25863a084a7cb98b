"""GPU paths of Iterative DPO (TRL) and Rationalization (generation backend + verl SFT), run on CPU.

The modules are the ones the paper config's rules call; only the generation backend differs (``hf``,
the local engine's transformers model, instead of vLLM) and the model is the tiny one.
"""

import copy
import json
import shutil
from dataclasses import replace

import pandas as pd
import pytest
import torch

from pipeline_lib.jobs.engines.trl import dpo as trl_dpo
from pipeline_lib.jobs.engines.verl.rationalization import annotate, annotation_settings, rationalization_paths
from pipeline_lib.jobs.eval.backends import open_backend
from pipeline_lib.jobs.methods.expert import expert_demonstrations, split_reasoning
from pipeline_lib.plan.settings import annotation_spec, dpo_spec, sft_spec
from tests.conftest import params
from tests.jobs.engines.conftest import paper_config

EVAL = {"backend": "hf", "batch_size": 8, "samples": 1, "max_new_tokens": 8, "temperature": 1.0, "top_p": 1.0,
        "transfer": {"task": None}}
DPO = {"rounds": 2, "pairs_per_round": 8, "steps_per_round": 4, "batch_size": 4, "batch_size_generate": 8,
       "lr": 1e-3, "weight_decay": 0.0, "beta": 0.1, "grad_clip": 1.0, "validation_prompts": 4, "max_new_tokens": 8,
       "max_response_tokens": 32, "temperature": 1.0, "backend": None, "per_device_batch_size": 2,
       "num_processes": 1, "accelerate_config": None, "bf16": False, "gradient_checkpointing": False,
       "loss_type": ["sigmoid"], "max_length": 256, "tasks": None}


def jsonl(path):
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def regenerate(model_dir, generation, prompts, seed, greedy=False):
    """What the generation backend gives for these prompts in a fresh process with this seed."""
    with open_backend(model_dir, generation, seed, model_dir) as backend:
        torch.manual_seed(seed)
        return [g[0].text for g in backend.generate(prompts, samples=1, greedy=greedy)]


def test_trl_iterative_dpo_pairs_expert_over_samples_raises_the_margin_picks_the_best_round_and_resumes(
        tiny, tmp_path, monkeypatch):
    config = {"train": {"baselines": {"iterative_dpo": DPO}}, "eval": EVAL}
    spec = trl_dpo.dpo_settings(dpo_spec(config, "gsm8k", "iterative_dpo", "verl"))
    assert "tasks" not in spec and spec["generation"]["batch_size"] == 8 and spec["generation"]["backend"] == "hf"
    data, demos, init = tiny / "data/rl_train.parquet", tiny / "data/sft_train.parquet", tiny / "init"
    straight = tmp_path / "straight"
    trl_dpo.train_iterative_dpo(spec, data, demos, init, straight, 0)

    done = json.loads((straight / "DONE.json").read_text())
    assert done["engine"] == "trl" and done["kind"] == "iterative_dpo" and done["final_step"] == 8
    frame = pd.read_parquet(data)
    expert = expert_demonstrations(frame, demos)
    prompts = [[dict(m) for m in p] for p in frame["prompt"]]
    validation = set(range(len(frame) - DPO["validation_prompts"], len(frame)))
    for r in (1, 2):
        round_dir = straight / f"rounds/round{r}"
        pairs = jsonl(round_dir / "pairs.jsonl")
        assert len(pairs) == DPO["pairs_per_round"] and not {p["row"] for p in pairs} & validation
        assert all(p["chosen"] == expert[p["row"]] and p["prompt"] == prompts[p["row"]] for p in pairs)
        # rejected = the round's starting model's own sample (SFT in round 1, round 1's model in round 2)
        start = init if r == 1 else straight / "rounds/round1/model"
        assert [p["rejected"] for p in pairs] == regenerate(start, spec["generation"],
                                                            [p["prompt"] for p in pairs], 0 * 1000 + r)
        assert any(p["rejected"] != p["chosen"] for p in pairs)
        # DPO raises the chosen-vs-rejected margin within each round (it starts at 0: policy == reference)
        margins = [m["margin"] for m in jsonl(straight / "metrics.jsonl") if m["round"] == r]
        assert len(margins) == DPO["steps_per_round"] and abs(margins[0]) < 1e-4 and margins[-1] > margins[0] + 1e-3
    rounds = json.loads((straight / "rounds.json").read_text())
    best = max(rounds["rounds"], key=lambda s: (s["validation_pass@1_greedy"], -s["round"]))
    assert rounds["best_round"] == best["round"] == done["best_round"]
    a, b = params(straight / "final"), params(straight / f"rounds/round{best['round']}/model")
    assert all(torch.equal(a[k], b[k]) for k in a)
    before = params(init)
    assert any(not torch.equal(before[k], a[k]) for k in a)

    # a crash in round 2's training; the rerun redoes nothing finished (no round-1 step, no round-2 sampling). Round 1
    # is the uninterrupted run's, copied (the unit of resume is a round: its round.json says it is finished), so only
    # round 2 runs again here
    killed = tmp_path / "killed"
    (killed / "rounds").mkdir(parents=True)
    shutil.copy2(straight / "run.json", killed / "run.json")
    shutil.copytree(straight / "rounds/round1", killed / "rounds/round1")
    real = trl_dpo._run

    def crash_in_round_two(command, label):
        if label.startswith("round 2: DPO"):
            raise RuntimeError("simulated crash")
        return real(command, label)

    monkeypatch.setattr(trl_dpo, "_run", crash_in_round_two)
    with pytest.raises(RuntimeError, match="simulated crash"):
        trl_dpo.train_iterative_dpo(spec, data, demos, init, killed, 0)
    assert not (killed / "DONE.json").exists() and (killed / "rounds/round2/samples.jsonl").is_file()
    finished = {p: p.stat().st_mtime_ns for p in [*(killed / "rounds/round1").rglob("*"),
                                                   *(killed / "rounds/round2").glob("*.jsonl")] if p.is_file()}
    labels = []

    def record(command, label):
        labels.append(label)
        return real(command, label)

    monkeypatch.setattr(trl_dpo, "_run", record)
    trl_dpo.train_iterative_dpo(spec, data, demos, init, killed, 0)
    assert labels == ["round 2: DPO training", "round 2: validation"]
    assert all(p.stat().st_mtime_ns == t for p, t in finished.items())
    for r in (1, 2):  # and it ends where the uninterrupted run ended
        a, b = params(straight / f"rounds/round{r}/model"), params(killed / f"rounds/round{r}/model")
        for key in a:
            torch.testing.assert_close(a[key], b[key])
    assert json.loads((killed / "rounds.json").read_text()) == rounds


def test_trl_batch_layout_and_launch_command():
    spec = copy.deepcopy(DPO)
    assert trl_dpo.gradient_accumulation(spec) == 2
    with pytest.raises(ValueError, match="multiple of per_device_batch_size x num_processes"):
        trl_dpo.gradient_accumulation(spec | {"per_device_batch_size": 3})
    plain = trl_dpo.train_command(spec, "p", "s", "o", 0)
    assert plain[1:4] == ["-m", "pipeline_lib.jobs.engines.trl.dpo", "train-round"]
    launched = trl_dpo.train_command(spec | {"num_processes": 4, "accelerate_config": "zero3.yaml"}, "p", "s", "o", 0)
    assert launched[1:7] == ["-m", "accelerate.commands.launch", "--num_processes", "4", "--config_file",
                             "zero3.yaml"]
    assert launched[7:10] == ["-m", "pipeline_lib.jobs.engines.trl.dpo", "train-round"]


def test_gpu_rationalization_annotates_in_the_sft_schema_and_its_verl_sft_run_validates(tiny, tmp_path):
    from pipeline_lib.jobs.engines.verl.translate import sft_overrides
    from pipeline_lib.jobs.engines.verl.validate import planned_runs, validate_sft

    config = paper_config()
    spec = annotation_settings(annotation_spec(config, "gsm8k"))
    assert spec["generation"]["backend"] == "vllm" and spec["generation"]["max_new_tokens"] == 1024
    assert spec["hint"] == config["train"]["baselines"]["rationalization"]["hint"]

    # annotation with the hf backend and a real tiny model
    spec["generation"] |= {"backend": "hf", "max_new_tokens": 12, "top_p": 1.0}
    data = tiny / "data/sft_train.parquet"
    out = annotate(spec, data, tiny / "init", tmp_path / "rationalized_sft.parquet", 3)
    original, annotated = pd.read_parquet(data), pd.read_parquet(out)
    assert list(annotated.columns) == list(original.columns) and len(annotated) == len(original)
    hinted = [[*[dict(m) for m in msgs[:-2]], {**dict(msgs[-2]), "content": msgs[-2]["content"] + "\n\n"
               + spec["hint"].format(answer=split_reasoning(msgs[-1]["content"])[1].strip())}]
              for msgs in original["messages"]]
    rationales = [split_reasoning(t)[0] for t in regenerate(tiny / "init", spec["generation"], hinted, 3)]
    assert any(rationales)
    for before, after, rationale in zip(original["messages"], annotated["messages"], rationales, strict=True):
        assert [dict(m) for m in after[:-1]] == [dict(m) for m in before[:-1]]  # the question, without the hint
        assert after[-1]["role"] == "assistant"
        assert after[-1]["content"] == rationale + split_reasoning(before[-1]["content"])[1]
    assert all(extra["rationalized"] for extra in annotated["extra_info"])

    # the verl SFT run on it: the task's SFT settings, the annotated parquet, checked against verl's config
    sft = sft_spec(config, "gsm8k", "rationalization", "verl")
    paths = rationalization_paths("gsm8k", 0, tmp_path)
    overrides = sft_overrides(sft, paths, 0)
    composed = validate_sft(overrides, label="gsm8k/rationalization/seed0")
    assert composed.data.train_files == str(tmp_path.resolve() / "results/train/gsm8k/rationalization/seed0/"
                                            "rationalized_sft.parquet")
    assert composed.model.path == config["train"]["verl"]["model"]
    assert "rationalization" in composed.trainer.experiment_name
    # = the task's SFT run, under the baseline's name (its DONE.json says kind "rationalization")
    assert replace(sft, method="sft") == sft_spec(config, "gsm8k", "sft", "verl")
    planned = {label: (kind, o) for label, kind, o in planned_runs(config, tmp_path)}
    for task in ("gsm8k", "countdown", "deepmath"):
        kind, planned_overrides = planned[f"{task}/rationalization/seed0"]
        assert kind == "sft" and any("rationalized_sft.parquet" in o for o in planned_overrides)
    # a typo'd SFT setting fails naming the run
    from pipeline_lib.jobs.engines.verl.validate import VerlOverrideError

    with pytest.raises(VerlOverrideError, match="gsm8k/rationalization/seed0"):
        validate_sft([*overrides, "optim.lrr=1e-5"], label="gsm8k/rationalization/seed0")


def test_paper_config_plans_the_gpu_rules_of_rationalization_and_iterative_dpo(workflow_copy):
    from tests.conftest import snakemake, with_specs

    tasks = ("gsm8k", "countdown", "deepmath")
    targets = [f"results/train/{task}/{method}/seed0/DONE.json" for task in tasks
               for method in ("rationalization", "iterative_dpo")]
    result = snakemake(workflow_copy, *targets, "-n", "-p", "--configfile", "config/paper.yaml",
                       full_console=True)
    assert result.returncode == 0, result.stderr[-3000:]
    jobs = with_specs(result.stdout, workflow_copy).split("\nrule ")[1:]
    for rule, module, name in (("annotate_rationales", "pipeline_lib.jobs.engines.verl.rationalization",
                                "rationalization"),
                               ("train_verl", "pipeline_lib.jobs.engines.verl.sft ", "rationalization"),
                               ("train_trl", "pipeline_lib.jobs.engines.trl.dpo run", "iterative_dpo")):
        blocks = [b for b in jobs if b.startswith(f"{rule}:")
                  and b.split("wildcards: run=")[1].split()[0].split("/")[1] == name]
        planned = sorted(b.split("wildcards: run=")[1].split("/")[0] for b in blocks)
        assert planned == sorted(tasks), (rule, planned)
        assert all(module in b for b in blocks)
    assert not any("pipeline_lib.jobs.engines.local." in b for b in jobs)  # no CPU engine
    annotations = [b for b in jobs if b.startswith("annotate_rationales:")]
    assert all('"model": "Qwen/Qwen2.5-1.5B"' in b for b in annotations)  # the annotator is the base model
