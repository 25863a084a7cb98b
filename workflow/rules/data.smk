# Stage "data": tiny synthetic tasks, the pipeline's tokenizer, the paper's datasets, ImageNet validation.


rule data_tiny:
    output:
        rl_train="results/data/{task}/rl_train.parquet",
        rl_test="results/data/{task}/rl_test.parquet",
        sft_train="results/data/{task}/sft_train.parquet",
        manifest="results/data/{task}/manifest.json",
    params:
        code=code_digest("pipeline_lib.data.build"),
        spec=json.dumps(tiny_task_spec(config)),
        weights=lambda wildcards: json.dumps(config["data"]["tiny"]["reward_weights"].get(wildcards.task)),
        seed=config["seed"],
        out_dir=lambda wildcards, output: os.path.dirname(output.manifest),
    wildcard_constraints:
        task="countdown_tiny|arith_tiny|meeting_tiny",
    log:
        "logs/data_tiny/{task}.log",
    benchmark:
        "results/benchmarks/data_tiny/{task}.tsv"
    conda:
        "../../envs/report.yaml"
    shell:
        "python -m pipeline_lib.data.build tiny --task {wildcards.task} --spec {params.spec:q}"
        " --reward-weights {params.weights:q} --seed {params.seed} --out-dir {params.out_dir} > {log} 2>&1"


rule data_tokenizer:
    input:
        expand("results/data/{task}/sft_train.parquet", task=config["data"]["tiny"]["tasks"]),
        expand("results/data/{task}/rl_train.parquet", task=config["data"]["tiny"]["tasks"]),
    output:
        tokenizer="results/data/tokenizer/tokenizer.json",
        config="results/data/tokenizer/tokenizer_config.json",
        manifest="results/data/tokenizer/manifest.json",
    params:
        code=code_digest("pipeline_lib.data.build"),
        vocab_size=config["data"]["tokenizer"]["vocab_size"],
        out_dir=lambda wildcards, output: os.path.dirname(output.manifest),
    log:
        "logs/data_tokenizer.log",
    benchmark:
        "results/benchmarks/data_tokenizer.tsv"
    conda:
        "../../envs/report.yaml"
    shell:
        "python -m pipeline_lib.data.build tokenizer --inputs {input} --vocab-size {params.vocab_size}"
        " --out-dir {params.out_dir} > {log} 2>&1"


rule data_build:
    output:
        rl_train="results/data/{dataset}/rl_train.parquet",
        rl_test="results/data/{dataset}/rl_test.parquet",
        sft_train="results/data/{dataset}/sft_train.parquet",
        manifest="results/data/{dataset}/manifest.json",
    params:
        code=code_digest("pipeline_lib.data.build"),
        spec=lambda wildcards: json.dumps(config["data"]["datasets"][wildcards.dataset]),
        out_dir=lambda wildcards, output: os.path.dirname(output.manifest),
    wildcard_constraints:
        dataset="gsm8k|deepmath|poetry|meetingbank|openthoughts",
    log:
        "logs/data_build/{dataset}.log",
    benchmark:
        "results/benchmarks/data_build/{dataset}.tsv"
    conda:
        "../../envs/report.yaml"
    shell:
        DATA_BUILD_COMMAND


rule data_build_countdown:
    output:
        rl_train="results/data/{dataset}/rl_train.parquet",
        rl_test="results/data/{dataset}/rl_test.parquet",
        sft_train="results/data/{dataset}/sft_train.parquet",
        rl_sim_train="results/data/{dataset}/rl_sim_train.parquet",
        manifest="results/data/{dataset}/manifest.json",
    params:
        code=code_digest("pipeline_lib.data.build"),
        spec=lambda wildcards: json.dumps(config["data"]["datasets"][wildcards.dataset]),
        out_dir=lambda wildcards, output: os.path.dirname(output.manifest),
    wildcard_constraints:
        dataset="countdown",
    log:
        "logs/data_build/{dataset}.log",
    benchmark:
        "results/benchmarks/data_build/{dataset}.tsv"
    conda:
        "../../envs/report.yaml"
    shell:
        DATA_BUILD_COMMAND


rule data_imagenet:
    output:
        manifest="results/data/imagenet/manifest.json",
    params:
        code=code_digest("pipeline_lib.data.build"),
        spec=json.dumps(config["imagenet"]),
        out_dir=lambda wildcards, output: os.path.dirname(output.manifest),
    log:
        "logs/data_imagenet.log",
    benchmark:
        "results/benchmarks/data_imagenet.tsv"
    conda:
        "../../envs/report.yaml"
    shell:
        "python -m pipeline_lib.data.build imagenet --spec {params.spec:q} --out-dir {params.out_dir} > {log} 2>&1"
