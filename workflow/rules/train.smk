# Stage "train". Language-model training rules are added by the local/verl engine issues.
# Each run owns its directory (checkpoints are not declared outputs); DONE.json is the sentinel.


rule train_imagenet:
    output:
        done="results/train/imagenet/{objective}/m{rollouts}/seed{seed}/DONE.json",
    params:
        spec=json.dumps(imagenet_run_spec(config["imagenet"])),
        run_dir=lambda wildcards, output: os.path.dirname(output.done),
    log:
        "logs/train_imagenet/{objective}_m{rollouts}_seed{seed}.log",
    benchmark:
        "results/benchmarks/train_imagenet/{objective}_m{rollouts}_seed{seed}.tsv"
    wildcard_constraints:
        objective="ml|reinforce|grpo|softmax",
        rollouts="[0-9]+",
    threads: 1
    conda:
        "../../envs/train-verl.yaml"
    shell:
        "python -m pipeline_lib.classify.train --spec {params.spec:q} --objective {wildcards.objective}"
        " --rollouts {wildcards.rollouts} --seed {wildcards.seed} --run-dir {params.run_dir}"
        " --threads {threads} > {log} 2>&1"


rule train_sft:
    input:
        data="results/data/{task}/sft_train.parquet",
        tokenizer="results/data/tokenizer/tokenizer.json",
    output:
        done="results/train/{task}/sft/seed{seed}/DONE.json",
    params:
        spec=json.dumps(sft_run_spec(config)),
        run_dir=lambda wildcards, output: os.path.dirname(output.done),
        tokenizer_dir=lambda wildcards, input: os.path.dirname(input.tokenizer),
    log:
        "logs/train_sft/{task}_seed{seed}.log",
    benchmark:
        "results/benchmarks/train_sft/{task}_seed{seed}.tsv"
    threads: 1
    conda:
        "../../envs/report.yaml"
    shell:
        "python -m pipeline_lib.engines.local.sft --spec {params.spec:q} --data {input.data}"
        " --tokenizer {params.tokenizer_dir} --run-dir {params.run_dir} --seed {wildcards.seed}"
        " --threads {threads} > {log} 2>&1"


rule train_rl:
    input:
        data=lambda wildcards: rl_train_data(config, wildcards.task, wildcards.method),
        init="results/train/{task}/sft/seed{seed}/DONE.json",
    output:
        done="results/train/{task}/{method}/seed{seed}/DONE.json",
    params:
        spec=lambda wildcards: json.dumps(rl_run_spec(config, wildcards.method)),
        run_dir=lambda wildcards, output: os.path.dirname(output.done),
        init_dir=lambda wildcards, input: os.path.join(os.path.dirname(input.init), "final"),
    wildcard_constraints:
        method="|".join(config["train"]["methods"]),
    log:
        "logs/train_rl/{task}_{method}_seed{seed}.log",
    benchmark:
        "results/benchmarks/train_rl/{task}_{method}_seed{seed}.tsv"
    threads: 1
    conda:
        "../../envs/report.yaml"
    shell:
        "python -m pipeline_lib.engines.local.rl --spec {params.spec:q} --data {input.data}"
        " --init {params.init_dir} --run-dir {params.run_dir} --seed {wildcards.seed}"
        " --threads {threads} > {log} 2>&1"
