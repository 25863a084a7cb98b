# Stage "eval": every trained checkpoint on its task's held-out prompts, scored by the task's verifier.


rule eval_checkpoint:
    input:
        done="results/train/{task}/{method}/seed{seed}/DONE.json",
        data="results/data/{task}/rl_test.parquet",
    output:
        metrics="results/eval/{task}/{method}/seed{seed}/metrics.json",
        generations="results/eval/{task}/{method}/seed{seed}/generations.jsonl",
    params:
        spec=json.dumps(config["eval"]),
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
        "python -m pipeline_lib.eval.local --model {params.model} --data {input.data} --spec {params.spec:q}"
        " --seed {wildcards.seed} --out {params.out_dir} --threads {threads} > {log} 2>&1"
