# Stage "eval": every trained checkpoint on its task's held-out prompts, scored by the task's verifier.

from pipeline_lib.core.cli import with_files
from pipeline_lib.plan.groups import eval_batch_command, job_priority
from pipeline_lib.plan.settings import eval_spec
from pipeline_lib.plan.targets import probe_inputs, probe_pattern, probe_run_spec, probe_seed, probe_start_model

# The evaluation jobs' env: vLLM generation (eval.backend vllm, the paper's) runs in the GPU env that locks vLLM; the
# hf and server backends in the CPU env of the other steps (tests/jobs/test_locks.py checks each lock holds its
# backend).
EVAL_ENV = "../../envs/eval.yaml" if eval_spec(config)["backend"] == "vllm" else "../../envs/cpu-steps.yaml"


# Every evaluation of one (task, seed) of a local-engine task in one process (one start-up instead of one per
# checkpoint; pipeline_lib.plan.groups.eval_batches): one rule per (task, seed), named eval_checkpoints_<task>_seed<N>;
# each evaluation writes what eval_checkpoint would. Evaluations of other checkpoints: eval_checkpoint.
for batch in EVAL_BATCHES:

    rule:
        name:
            f"eval_checkpoints_{batch.name}"
        input:
            done=batch.paths("train", "DONE.json"),
            data=f"results/data/{batch.task}/rl_test.parquet",
            canary=after_canary(f"eval_checkpoints_{batch.name}"),
        output:
            metrics=batch.paths("eval", "metrics.json"),
            generations=batch.paths("eval", "generations.jsonl"),
        params:
            code=code_digest("pipeline_lib.jobs.engines.local.batch") + code_digest("pipeline_lib.jobs.eval.evaluate"),
            spec=json.dumps(eval_spec(config, batch.task)),  # in the command too; a plain parameter is what Snakemake compares
            command=lambda wildcards, threads, batch=batch: eval_batch_command(config, batch, threads),
        log:
            f"logs/eval_checkpoints/{batch.name}.log",
        benchmark:
            f"results/benchmarks/eval_checkpoints/{batch.name}.tsv"
        priority: job_priority("eval_checkpoints")
        threads: 1
        conda:
            EVAL_ENV
        shell:
            "{params.command} 3>&2 > {log} 2>&1"  # fd 3: the batch's one line per checkpoint, to the console

    workflow.ruleorder(f"eval_checkpoints_{batch.name}", "eval_checkpoint")


rule eval_checkpoint:
    input:
        done="results/train/{task}/{method}/seed{seed}/DONE.json",
        canary=after_canary("eval_checkpoint"),
        data="results/data/{task}/rl_test.parquet",
    output:
        metrics="results/eval/{task}/{method}/seed{seed}/metrics.json",
        generations="results/eval/{task}/{method}/seed{seed}/generations.jsonl",
    params:
        code=code_digest("pipeline_lib.jobs.eval.evaluate"),
        **with_files(eval_params(config, "checkpoint"), "spec"),
    log:
        "logs/eval_checkpoint/{task}_{method}_seed{seed}.log",
    benchmark:
        "results/benchmarks/eval_checkpoint/{task}_{method}_seed{seed}.tsv"
    priority: job_priority("eval_checkpoint")
    threads: 1
    conda:
        EVAL_ENV
    shell:
        "python -m pipeline_lib.jobs.eval.evaluate --model {params.model} --data {input.data} --spec {params.spec_file}"
        " --seed {wildcards.seed} --out {params.out_dir} --threads {threads} > {log} 2>&1"


# A variant run (RL-Logit's reward variants) on its held-out validation prompts: what selects Table 1's variant.
rule eval_validation:
    input:
        done="results/train/{task}/{method}/seed{seed}/DONE.json",
        canary=after_canary("eval_validation"),
        data="results/data/{task}/holdout/rl_val.parquet",
    output:
        metrics="results/eval/{task}/{method}/seed{seed}/validation/metrics.json",
        generations="results/eval/{task}/{method}/seed{seed}/validation/generations.jsonl",
    params:
        code=code_digest("pipeline_lib.jobs.eval.evaluate"),
        **with_files(eval_params(config, "validation"), "spec"),
    log:
        "logs/eval_validation/{task}_{method}_seed{seed}.log",
    benchmark:
        "results/benchmarks/eval_validation/{task}_{method}_seed{seed}.tsv"
    priority: job_priority("eval_validation")
    threads: 1
    conda:
        EVAL_ENV
    shell:
        "python -m pipeline_lib.jobs.eval.evaluate --model {params.model} --data {input.data} --spec {params.spec_file}"
        " --seed {wildcards.seed} --out {params.out_dir} --threads {threads} > {log} 2>&1"


# Transfer benchmarks of one task's checkpoints (paper: the OpenThoughts run) through the libraries themselves.
rule eval_lm_eval:
    input:
        done="results/train/{task}/{method}/seed{seed}/DONE.json",
        canary=after_canary("eval_lm_eval"),
    output:
        "results/eval/transfer/{task}/{method}/seed{seed}/lm_eval.json",
    params:
        code=code_digest("pipeline_lib.jobs.eval.harness"),
        **with_files(eval_params(config, "lm_eval"), "spec"),
    log:
        "logs/eval_lm_eval/{task}_{method}_seed{seed}.log",
    benchmark:
        "results/benchmarks/eval_lm_eval/{task}_{method}_seed{seed}.tsv"
    conda:
        "../../envs/eval.yaml"
    shell:
        "python -m pipeline_lib.jobs.eval.harness lm-eval --model {params.model} --spec {params.spec_file}"
        " --seed {wildcards.seed} --out {output} > {log} 2>&1"


# AlpacaEval in two halves: the checkpoint's answers on a GPU node (offline, after `fetch` put AlpacaEval's instructions
# in the cache), then the annotation on the submit host, a local rule: the annotator calls its API (online).
rule eval_alpaca_generate:
    input:
        done="results/train/{task}/{method}/seed{seed}/DONE.json",
        canary=after_canary("eval_alpaca_generate"),
        fetched=after_fetch,
    output:
        "results/eval/transfer/{task}/{method}/seed{seed}/alpaca_model_outputs.json",
    params:
        code=code_digest("pipeline_lib.jobs.eval.harness"),
        **with_files(eval_params(config, "alpaca_eval"), "spec", "eval_spec"),
    log:
        "logs/eval_alpaca_generate/{task}_{method}_seed{seed}.log",
    benchmark:
        "results/benchmarks/eval_alpaca_generate/{task}_{method}_seed{seed}.tsv"
    conda:
        "../../envs/eval.yaml"
    shell:
        "python -m pipeline_lib.jobs.eval.harness alpaca-eval-generate --model {params.model} --spec {params.spec_file}"
        " --eval-spec {params.eval_spec_file} --seed {wildcards.seed} --method {wildcards.method} --out {output}"
        " > {log} 2>&1"


localrules:
    eval_alpaca_eval,


rule eval_alpaca_eval:
    input:
        outputs=rules.eval_alpaca_generate.output[0],
        fetched=after_fetch,
    output:
        "results/eval/transfer/{task}/{method}/seed{seed}/alpaca_eval.json",
    params:
        code=code_digest("pipeline_lib.jobs.eval.harness"),
        **with_files({"spec": json.dumps(config["eval"]["transfer"]["alpaca_eval"])}, "spec"),
    resources:
        judge_requests=8,  # the annotator's requests in flight, held to the global cap with the judges'
    log:
        "logs/eval_alpaca_eval/{task}_{method}_seed{seed}.log",
    benchmark:
        "results/benchmarks/eval_alpaca_eval/{task}_{method}_seed{seed}.tsv"
    conda:
        "../../envs/eval.yaml"
    shell:
        "python -m pipeline_lib.jobs.eval.harness alpaca-eval --outputs {input.outputs} --spec {params.spec_file}"
        " --seed {wildcards.seed} --out {output} > {log} 2>&1"


# Table 3's pass-rate probe of one paired RL run that kept its policies (train.rl.probe_every): each probed group's
# prompt sampled from the policy of its window (pipeline_lib.jobs.eval.probe), so p is measured apart from the group.
rule probe_pass_rate:
    input:
        done="results/train/{run}/DONE.json",
        canary=after_canary("probe_pass_rate"),
        data=lambda wildcards: probe_inputs(PLAN, wildcards.run)["data"],
        init=lambda wildcards: probe_inputs(PLAN, wildcards.run)["init"],
        fetched=lambda wildcards: after_fetch(wildcards) if not probe_inputs(PLAN, wildcards.run)["init"] else [],
    output:
        probe="results/probe/{run}/probe.jsonl",
        summary="results/probe/{run}/summary.json",
    params:
        code=code_digest("pipeline_lib.jobs.eval.probe"),
        **with_files({"spec": lambda wildcards: json.dumps(probe_run_spec(config, PLAN, wildcards.run))}, "spec"),
        model=lambda wildcards: probe_start_model(PLAN, wildcards.run),
        seed=lambda wildcards: probe_seed(PLAN, wildcards.run),
        out_dir=lambda wildcards, output: os.path.dirname(output.probe),
    wildcard_constraints:
        run=probe_pattern(PLAN),
    log:
        "logs/probe_pass_rate/{run}.log",
    benchmark:
        "results/benchmarks/probe_pass_rate/{run}.tsv"
    priority: job_priority("eval_checkpoint")
    threads: 1
    conda:
        EVAL_ENV
    shell:
        "python -m pipeline_lib.jobs.eval.probe --run results/train/{wildcards.run} --init {params.model}"
        " --data {input.data} --spec {params.spec_file} --seed {params.seed} --out {params.out_dir}"
        " --threads {threads} > {log} 2>&1"
