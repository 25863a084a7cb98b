# Stage "eval": every trained checkpoint on its task's held-out prompts, scored by the task's verifier.

from pipeline_lib.plan.groups import eval_group_command
from pipeline_lib.specs import eval_spec


# SFT and every train.methods run of one (task, seed) on the local engine, evaluated in one process (one start-up
# instead of one per checkpoint; pipeline_lib.plan.groups); each evaluation writes what eval_checkpoint would.
rule eval_checkpoints:
    input:
        done=expand("results/train/{{task}}/{method}/seed{{seed}}/DONE.json", method=GROUPS.evaluated),
        data="results/data/{task}/rl_test.parquet",
    output:
        metrics=expand("results/eval/{{task}}/{method}/seed{{seed}}/metrics.json", method=GROUPS.evaluated),
        generations=expand("results/eval/{{task}}/{method}/seed{{seed}}/generations.jsonl",
                           method=GROUPS.evaluated),
    params:
        code=code_digest("pipeline_lib.engines.local.batch") + code_digest("pipeline_lib.eval.evaluate"),
        spec=json.dumps(eval_spec(config)),  # in the command too; a plain parameter is what Snakemake compares
        command=lambda wildcards, threads: eval_group_command(config, wildcards.task, wildcards.seed, threads),
    wildcard_constraints:
        task=GROUPS.pattern(GROUPS.tasks),
        seed=GROUPS.pattern(GROUPS.seeds),
    log:
        "logs/eval_checkpoints/{task}_seed{seed}.log",
    benchmark:
        "results/benchmarks/eval_checkpoints/{task}_seed{seed}.tsv"
    threads: 1
    conda:
        "../../envs/report.yaml"
    shell:
        "{params.command} > {log} 2>&1"


ruleorder: eval_checkpoints > eval_checkpoint


rule eval_checkpoint:
    input:
        done="results/train/{task}/{method}/seed{seed}/DONE.json",
        data="results/data/{task}/rl_test.parquet",
    output:
        metrics="results/eval/{task}/{method}/seed{seed}/metrics.json",
        generations="results/eval/{task}/{method}/seed{seed}/generations.jsonl",
    params:
        code=code_digest("pipeline_lib.eval.evaluate"),
        spec=json.dumps(eval_spec(config)),
        model=lambda wildcards, input: os.path.join(os.path.dirname(input.done), "final"),
        out_dir=lambda wildcards, output: os.path.dirname(output.metrics),
    log:
        "logs/eval_checkpoint/{task}_{method}_seed{seed}.log",
    benchmark:
        "results/benchmarks/eval_checkpoint/{task}_{method}_seed{seed}.tsv"
    threads: 1
    conda:
        "../../envs/report.yaml"
    shell:
        "python -m pipeline_lib.eval.evaluate --model {params.model} --data {input.data} --spec {params.spec:q}"
        " --seed {wildcards.seed} --out {params.out_dir} --threads {threads} > {log} 2>&1"


# Transfer benchmarks of one task's checkpoints (paper: the OpenThoughts run) through the libraries themselves.
rule eval_lm_eval:
    input:
        done="results/train/{task}/{method}/seed{seed}/DONE.json",
    output:
        "results/eval/transfer/{task}/{method}/seed{seed}/lm_eval.json",
    params:
        code=code_digest("pipeline_lib.eval.harness"),
        spec=json.dumps(config["eval"]["transfer"]["lm_eval"]),
        model=lambda wildcards, input: os.path.join(os.path.dirname(input.done), "final"),
    log:
        "logs/eval_lm_eval/{task}_{method}_seed{seed}.log",
    benchmark:
        "results/benchmarks/eval_lm_eval/{task}_{method}_seed{seed}.tsv"
    conda:
        "../../envs/eval.yaml"
    shell:
        "python -m pipeline_lib.eval.harness lm-eval --model {params.model} --spec {params.spec:q}"
        " --seed {wildcards.seed} --out {output} > {log} 2>&1"


rule eval_alpaca_eval:
    input:
        done="results/train/{task}/{method}/seed{seed}/DONE.json",
    output:
        "results/eval/transfer/{task}/{method}/seed{seed}/alpaca_eval.json",
    params:
        code=code_digest("pipeline_lib.eval.harness"),
        spec=json.dumps(config["eval"]["transfer"]["alpaca_eval"]),
        eval_spec=json.dumps(eval_spec(config)),
        model=lambda wildcards, input: os.path.join(os.path.dirname(input.done), "final"),
    log:
        "logs/eval_alpaca_eval/{task}_{method}_seed{seed}.log",
    benchmark:
        "results/benchmarks/eval_alpaca_eval/{task}_{method}_seed{seed}.tsv"
    conda:
        "../../envs/eval.yaml"
    shell:
        "python -m pipeline_lib.eval.harness alpaca-eval --model {params.model} --spec {params.spec:q}"
        " --eval-spec {params.eval_spec:q} --seed {wildcards.seed} --out {output} > {log} 2>&1"
