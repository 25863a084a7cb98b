# Stage "data": tiny synthetic tasks, the pipeline's tokenizer, the paper's datasets, ImageNet validation. Which tasks
# and datasets exist (wildcard constraints) and each one's parameters: pipeline_lib.paper.steps / pipeline_lib.plan.targets.

from pipeline_lib.core.cli import with_files
from pipeline_lib.plan.groups import job_priority
from pipeline_lib.plan.settings import reference_prompts
from pipeline_lib.plan.targets import holdout_tasks


rule data_tiny:
    output:
        rl_train="results/data/{task}/rl_train.parquet",
        rl_test="results/data/{task}/rl_test.parquet",
        sft_train="results/data/{task}/sft_train.parquet",
        manifest="results/data/{task}/manifest.json",
    params:
        code=code_digest("pipeline_lib.core.data.build"),
        **with_files(data_params(config, "tiny"), "spec", "weights"),
    wildcard_constraints:
        task=pattern(TINY_TASKS),
    log:
        "logs/data_tiny/{task}.log",
    benchmark:
        "results/benchmarks/data_tiny/{task}.tsv"
    priority: job_priority("data_tiny")  # first: everything waits on the data (pipeline_lib.plan.groups)
    conda:
        "../../envs/cpu-steps.yaml"
    shell:
        "python -m pipeline_lib.core.data.build tiny --task {wildcards.task} --spec {params.spec_file}"
        " --reward-weights {params.weights_file} --seed {params.seed} --out-dir {params.out_dir} > {log} 2>&1"


rule data_tokenizer:
    input:
        tokenizer_inputs(config),
    output:
        tokenizer="results/data/tokenizer/tokenizer.json",
        config="results/data/tokenizer/tokenizer_config.json",
        manifest="results/data/tokenizer/manifest.json",
    params:
        code=code_digest("pipeline_lib.core.data.build"),
        **data_params(config, "tokenizer"),
    log:
        "logs/data_tokenizer.log",
    benchmark:
        "results/benchmarks/data_tokenizer.tsv"
    priority: job_priority("data_tokenizer")  # first: everything waits on the data (pipeline_lib.plan.groups)
    conda:
        "../../envs/cpu-steps.yaml"
    shell:
        "python -m pipeline_lib.core.data.build tokenizer --inputs {input} --vocab-size {params.vocab_size}"
        " --out-dir {params.out_dir} > {log} 2>&1"


# A paper dataset: data_build_reference also writes rl_sim_train (the prompts with an expert answer, where the RL
# prompts have none: Countdown); data_build_online builds a dataset whose build calls an endpoint (Poetry's instruction
# synthesis: pipeline_lib.plan.site.ONLINE_STEPS), a local rule on the submit host, the one place with outbound access.
# Its inputs are the raw local files it reads (pipeline_lib.core.data.real.source_files).
from pipeline_lib.core.data.real import source_files


localrules:
    data_build_online,


for data_rule, extra, online in (("data_build", {}, False),
                                 ("data_build_reference", {"rl_sim_train": "rl_sim_train.parquet"}, False),
                                 ("data_build_online", {}, True)):

    rule:
        name:
            data_rule
        input:
            lambda wildcards: source_files(config["data"]["datasets"][wildcards.dataset]),
            fetched=after_fetch,
        output:
            **{name: f"results/data/{{dataset}}/{name}.parquet" for name in ("rl_train", "rl_test", "sft_train")},
            **{name: f"results/data/{{dataset}}/{path}" for name, path in extra.items()},
            manifest="results/data/{dataset}/manifest.json",
        params:
            code=code_digest("pipeline_lib.core.data.build"),
            **with_files(data_params(config, "build"), "spec"),
        wildcard_constraints:
            dataset=dataset_pattern(config, with_reference_prompts=bool(extra), online=online),
        log:
            f"logs/{'data_build_online' if online else 'data_build'}/{{dataset}}.log",
        benchmark:
            f"results/benchmarks/{'data_build_online' if online else 'data_build'}/{{dataset}}.tsv"
        conda:
            "../../envs/cpu-steps.yaml"
        shell:
            "python -m pipeline_lib.core.data.build real --dataset {wildcards.dataset} --spec {params.spec_file}"
            " --out-dir {params.out_dir} > {log} 2>&1"


rule data_imagenet:
    output:
        manifest="results/data/imagenet/manifest.json",
    params:
        code=code_digest("pipeline_lib.core.data.build"),
        **with_files(data_params(config, "imagenet"), "spec"),
    log:
        "logs/data_imagenet.log",
    benchmark:
        "results/benchmarks/data_imagenet.tsv"
    conda:
        "../../envs/cpu-steps.yaml"
    shell:
        "python -m pipeline_lib.core.data.build imagenet --spec {params.spec_file} --out-dir {params.out_dir} > {log} 2>&1"


# A task's reference prompts with their last N held out (train.baselines.rl_logit.validation_prompts): the variant runs
# train on rl_train, the selection among them reads only their evaluations on rl_val (pipeline_lib.plan.settings).
rule data_holdout:
    input:
        data=lambda wildcards: reference_prompts(wildcards.task),
    output:
        train="results/data/{task}/holdout/rl_train.parquet",
        val="results/data/{task}/holdout/rl_val.parquet",
    params:
        code=code_digest("pipeline_lib.core.data.build"),
        **data_params(config, "holdout"),
    wildcard_constraints:
        task=pattern(holdout_tasks(PLAN)),
    log:
        "logs/data_holdout/{task}.log",
    benchmark:
        "results/benchmarks/data_holdout/{task}.tsv"
    priority: job_priority("data_holdout")
    conda:
        "../../envs/cpu-steps.yaml"
    shell:
        "python -m pipeline_lib.core.data.build holdout --data {input.data}"
        " --validation-prompts {params.validation_prompts} --out-dir {params.out_dir} > {log} 2>&1"
