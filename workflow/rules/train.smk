# Stage "train". Language-model training rules are added by the local/verl engine issues.
# Each run owns its directory (checkpoints are not declared outputs); DONE.json is the sentinel.


rule train_imagenet:
    output:
        done="results/train/imagenet/{objective}/m{rollouts}/seed{seed}/DONE.json",
    params:
        code=code_digest("pipeline_lib.classify.train"),
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


# The local PyTorch engine: every task with `train.engine: local`, and with `verl` the tasks that have no
# `train.verl.tasks` entry (the tiny analogues a paper config inherits from config/config.yaml).
LOCAL_TASK = local_task_pattern(config)


rule train_sft:
    input:
        data="results/data/{task}/sft_train.parquet",
        tokenizer="results/data/tokenizer/tokenizer.json",
    output:
        done="results/train/{task}/sft/seed{seed}/DONE.json",
    params:
        code=code_digest("pipeline_lib.engines.local.sft"),
        spec=json.dumps(sft_run_spec(config)),
        run_dir=lambda wildcards, output: os.path.dirname(output.done),
        tokenizer_dir=lambda wildcards, input: os.path.dirname(input.tokenizer),
    wildcard_constraints:
        task=LOCAL_TASK,
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
        code=code_digest("pipeline_lib.engines.local.rl"),
        spec=lambda wildcards: json.dumps(rl_run_spec(config, wildcards.method)),
        run_dir=lambda wildcards, output: os.path.dirname(output.done),
        init_dir=lambda wildcards, input: os.path.join(os.path.dirname(input.init), "final"),
    wildcard_constraints:
        method="|".join(config["train"]["methods"]),
        task=LOCAL_TASK,
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


# --- The paper's runs on verl 0.9.1 (train.engine: verl). Same outputs as the local rules (DONE.json, final/,
# metrics.jsonl, rollouts.jsonl), so evaluation and the tables treat both engines alike. GPUs, nodes, memory and
# runtime per rule live in profiles/slurm/config.yaml; every run's overrides are validated at parse time.
if config["train"]["engine"] == "verl":
    VERL_TASK = "|".join(config["train"]["verl"]["tasks"])

    rule train_verl_sft:
        input:
            data="results/data/{task}/sft_train.parquet",
        output:
            done="results/train/{task}/sft/seed{seed}/DONE.json",
        params:
            code=code_digest("pipeline_lib.engines.verl.train"),
            spec=lambda wildcards: json.dumps(verl_sft_spec(config, wildcards.task)),
            run_dir=lambda wildcards, output: os.path.dirname(output.done),
        wildcard_constraints:
            task=VERL_TASK,
        resources:  # the App. B compute setup (config); CPUs, memory, runtime: profiles/slurm
            nodes=lambda wildcards: verl_slurm_resources(config, wildcards.task, "sft")["nodes"],
            gres=lambda wildcards: verl_slurm_resources(config, wildcards.task, "sft")["gres"],
        log:
            "logs/train_verl_sft/{task}_seed{seed}.log",
        benchmark:
            "results/benchmarks/train_verl_sft/{task}_seed{seed}.tsv"
        conda:
            "../../envs/train-verl.yaml"
        shell:
            "python -m pipeline_lib.engines.verl.train sft --spec {params.spec:q} --data {input.data}"
            " --run-dir {params.run_dir} --seed {wildcards.seed} > {log} 2>&1"

    rule train_verl_rl:
        input:
            data=lambda wildcards: rl_train_data(config, wildcards.task, wildcards.method),
            val="results/data/{task}/rl_test.parquet",
            init="results/train/{task}/sft/seed{seed}/DONE.json",
        output:
            done="results/train/{task}/{method}/seed{seed}/DONE.json",
        params:
            code=code_digest("pipeline_lib.engines.verl.train"),
            spec=lambda wildcards: json.dumps(verl_rl_spec(config, wildcards.task, wildcards.method)),
            run_dir=lambda wildcards, output: os.path.dirname(output.done),
            init_dir=lambda wildcards, input: os.path.join(os.path.dirname(input.init), "final"),
        wildcard_constraints:
            method="|".join(config["train"]["methods"]),
            task=VERL_TASK,
        resources:  # the App. B compute setup (config); CPUs, memory, runtime: profiles/slurm
            nodes=lambda wildcards: verl_slurm_resources(config, wildcards.task, "rl")["nodes"],
            gres=lambda wildcards: verl_slurm_resources(config, wildcards.task, "rl")["gres"],
        log:
            "logs/train_verl_rl/{task}_{method}_seed{seed}.log",
        benchmark:
            "results/benchmarks/train_verl_rl/{task}_{method}_seed{seed}.tsv"
        conda:
            "../../envs/train-verl.yaml"
        shell:
            "python -m pipeline_lib.engines.verl.train rl --spec {params.spec:q} --data {input.data}"
            " --val-data {input.val} --init {params.init_dir} --run-dir {params.run_dir} --seed {wildcards.seed}"
            " > {log} 2>&1"


    # OPD, RL-Logit and RARO on verl (translate.VERL_BASELINES): the task's App. B RL run from SFT with the
    # baseline's own overrides (distillation.* for OPD; the pipeline's agent loops for RL-Logit and RARO).
    rule train_verl_baseline:
        input:
            data=lambda wildcards: baseline_train_data(wildcards.task, wildcards.method),
            val="results/data/{task}/rl_test.parquet",
            init="results/train/{task}/sft/seed{seed}/DONE.json",
        output:
            done="results/train/{task}/{method}/seed{seed}/DONE.json",
        params:
            code=code_digest("pipeline_lib.engines.verl.train"),
            spec=lambda wildcards: json.dumps(verl_baseline_spec(config, wildcards.task, wildcards.method)),
            run_dir=lambda wildcards, output: os.path.dirname(output.done),
            init_dir=lambda wildcards, input: os.path.join(os.path.dirname(input.init), "final"),
        wildcard_constraints:
            method="|".join(VERL_BASELINES),
            task=VERL_TASK,
        resources:  # the App. B compute setup (config); CPUs, memory, runtime: profiles/slurm
            nodes=lambda wildcards: verl_slurm_resources(config, wildcards.task, wildcards.method)["nodes"],
            gres=lambda wildcards: verl_slurm_resources(config, wildcards.task, wildcards.method)["gres"],
        log:
            "logs/train_verl_baseline/{task}_{method}_seed{seed}.log",
        benchmark:
            "results/benchmarks/train_verl_baseline/{task}_{method}_seed{seed}.tsv"
        conda:
            "../../envs/train-verl.yaml"
        shell:
            "python -m pipeline_lib.engines.verl.train rl --spec {params.spec:q} --data {input.data}"
            " --val-data {input.val} --init {params.init_dir} --run-dir {params.run_dir} --seed {wildcards.seed}"
            " > {log} 2>&1"

    from pipeline_lib.engines.trl.dpo import trl_dpo_spec
    from pipeline_lib.engines.verl.rationalization import annotation_spec, rationalization_sft_spec

    # Iterative DPO on GPU (verl has no DPO): per round, on-policy samples through the eval generation backend
    # (vLLM), then TRL's DPOTrainer (round start = reference); best round on held-out training prompts -> final/.
    rule train_trl_iterative_dpo:
        input:
            data=lambda wildcards: baseline_train_data(wildcards.task, "iterative_dpo"),
            demonstrations="results/data/{task}/sft_train.parquet",
            init="results/train/{task}/sft/seed{seed}/DONE.json",
        output:
            done="results/train/{task}/iterative_dpo/seed{seed}/DONE.json",
        params:
            code=code_digest("pipeline_lib.engines.trl.dpo"),
            spec=json.dumps(trl_dpo_spec(config)),
            run_dir=lambda wildcards, output: os.path.dirname(output.done),
            init_dir=lambda wildcards, input: os.path.join(os.path.dirname(input.init), "final"),
        wildcard_constraints:
            task=VERL_TASK,
        resources:  # one node, a GPU per training process (= the config); CPUs, memory, runtime: profiles/slurm
            gpu=config["train"]["baselines"]["iterative_dpo"]["num_processes"],
        log:
            "logs/train_trl_iterative_dpo/{task}_seed{seed}.log",
        benchmark:
            "results/benchmarks/train_trl_iterative_dpo/{task}_seed{seed}.tsv"
        conda:
            "../../envs/train-verl.yaml"
        shell:
            "python -m pipeline_lib.engines.trl.dpo run --spec {params.spec:q} --data {input.data}"
            " --demonstrations {input.demonstrations} --init {params.init_dir} --run-dir {params.run_dir}"
            " --seed {wildcards.seed} > {log} 2>&1"

    # Rationalization (STaR) on GPU: the base model (train.verl.model) annotates through the eval generation
    # backend; verl's SFT trainer then trains on the annotated parquet with the task's SFT settings.
    rule annotate_rationales:
        input:
            data="results/data/{task}/sft_train.parquet",
        output:
            annotated="results/train/{task}/rationalization/seed{seed}/rationalized_sft.parquet",
        params:
            code=code_digest("pipeline_lib.engines.verl.rationalization"),
            spec=lambda wildcards: json.dumps(annotation_spec(config)),  # a function: the hint holds "{answer}"
            model=config["train"]["verl"]["model"],
        wildcard_constraints:
            task=VERL_TASK,
        resources:  # vLLM's tensor-parallel GPUs (eval.vllm); CPUs, memory, runtime: profiles/slurm
            gpu=config["eval"]["vllm"]["tensor_parallel_size"],
        log:
            "logs/annotate_rationales/{task}_seed{seed}.log",
        benchmark:
            "results/benchmarks/annotate_rationales/{task}_seed{seed}.tsv"
        conda:
            "../../envs/train-verl.yaml"
        shell:
            "python -m pipeline_lib.engines.verl.rationalization --spec {params.spec:q} --data {input.data}"
            " --model {params.model} --out {output.annotated} --seed {wildcards.seed} > {log} 2>&1"

    rule train_verl_rationalization:
        input:
            data="results/train/{task}/rationalization/seed{seed}/rationalized_sft.parquet",
        output:
            done="results/train/{task}/rationalization/seed{seed}/DONE.json",
        params:
            code=code_digest("pipeline_lib.engines.verl.train"),
            spec=lambda wildcards: json.dumps(rationalization_sft_spec(config, wildcards.task)),
            run_dir=lambda wildcards, output: os.path.dirname(output.done),
        wildcard_constraints:
            task=VERL_TASK,
        resources:  # the App. B compute setup of the task's SFT run; CPUs, memory, runtime: profiles/slurm
            nodes=lambda wildcards: verl_slurm_resources(config, wildcards.task, "sft")["nodes"],
            gres=lambda wildcards: verl_slurm_resources(config, wildcards.task, "sft")["gres"],
        log:
            "logs/train_verl_rationalization/{task}_seed{seed}.log",
        benchmark:
            "results/benchmarks/train_verl_rationalization/{task}_seed{seed}.tsv"
        conda:
            "../../envs/train-verl.yaml"
        shell:
            "python -m pipeline_lib.engines.verl.train sft --spec {params.spec:q} --data {input.data}"
            " --run-dir {params.run_dir} --seed {wildcards.seed} > {log} 2>&1"


# --- Baselines of Table 1 (paper Sec. 5.2, App. B); each reads its spec from train.baselines.<name> ---------------


rule train_base:
    input:
        tokenizer="results/data/tokenizer/tokenizer.json",
    output:
        done="results/train/{task}/base/seed{seed}/DONE.json",
    params:
        code=code_digest("pipeline_lib.engines.local.base"),
        spec=json.dumps(baseline_spec(config, "base")),
        run_dir=lambda wildcards, output: os.path.dirname(output.done),
        tokenizer_dir=lambda wildcards, input: os.path.dirname(input.tokenizer),
        init=lambda wildcards: f"--init {base_init(config, wildcards.task)}" if base_init(config, wildcards.task) else "",
    log:
        "logs/train_base/{task}_seed{seed}.log",
    benchmark:
        "results/benchmarks/train_base/{task}_seed{seed}.tsv"
    threads: 1
    conda:
        "../../envs/report.yaml"
    shell:
        "python -m pipeline_lib.engines.local.base --spec {params.spec:q} --tokenizer {params.tokenizer_dir}"
        " --run-dir {params.run_dir} --seed {wildcards.seed} {params.init} > {log} 2>&1"


# STaR: the annotator (base or SFT model) writes rationales; SFT from the base model on them.
rule train_rationalization:
    input:
        data="results/data/{task}/sft_train.parquet",
        tokenizer="results/data/tokenizer/tokenizer.json",
        annotator=lambda wildcards: "results/train/{}/{}/seed{}/DONE.json".format(
            wildcards.task, config["train"]["baselines"]["rationalization"]["annotator"], wildcards.seed),
        base="results/train/{task}/base/seed{seed}/DONE.json",
    output:
        done="results/train/{task}/rationalization/seed{seed}/DONE.json",
    params:
        code=code_digest("pipeline_lib.engines.local.rationalization"),
        spec=lambda wildcards: json.dumps(baseline_spec(config, "rationalization")),  # the hint holds "{answer}"
        run_dir=lambda wildcards, output: os.path.dirname(output.done),
        tokenizer_dir=lambda wildcards, input: os.path.dirname(input.tokenizer),
        annotator_dir=lambda wildcards, input: os.path.join(os.path.dirname(input.annotator), "final"),
        base_dir=lambda wildcards, input: os.path.join(os.path.dirname(input.base), "final"),
    wildcard_constraints:
        task=LOCAL_TASK,
    log:
        "logs/train_rationalization/{task}_seed{seed}.log",
    benchmark:
        "results/benchmarks/train_rationalization/{task}_seed{seed}.tsv"
    threads: 1
    conda:
        "../../envs/report.yaml"
    shell:
        "python -m pipeline_lib.engines.local.rationalization --spec {params.spec:q} --data {input.data}"
        " --annotator {params.annotator_dir} --init {params.base_dir} --tokenizer {params.tokenizer_dir}"
        " --run-dir {params.run_dir}"
        " --seed {wildcards.seed} --threads {threads} > {log} 2>&1"


rule train_iterative_dpo:
    input:
        data="results/data/{task}/rl_train.parquet",
        demonstrations="results/data/{task}/sft_train.parquet",
        init="results/train/{task}/sft/seed{seed}/DONE.json",
    output:
        done="results/train/{task}/iterative_dpo/seed{seed}/DONE.json",
    params:
        code=code_digest("pipeline_lib.engines.local.dpo"),
        spec=json.dumps(baseline_spec(config, "iterative_dpo")),
        run_dir=lambda wildcards, output: os.path.dirname(output.done),
        init_dir=lambda wildcards, input: os.path.join(os.path.dirname(input.init), "final"),
    wildcard_constraints:
        task=LOCAL_TASK,
    log:
        "logs/train_iterative_dpo/{task}_seed{seed}.log",
    benchmark:
        "results/benchmarks/train_iterative_dpo/{task}_seed{seed}.tsv"
    threads: 1
    conda:
        "../../envs/report.yaml"
    shell:
        "python -m pipeline_lib.engines.local.dpo --spec {params.spec:q} --data {input.data}"
        " --demonstrations {input.demonstrations} --init {params.init_dir} --run-dir {params.run_dir}"
        " --seed {wildcards.seed} --threads {threads} > {log} 2>&1"


# RL-Logit and RARO: group RL from the SFT model on the expert demonstrations (module = the rule's method).
rule train_expert_rl:
    input:
        data="results/data/{task}/rl_train.parquet",
        demonstrations="results/data/{task}/sft_train.parquet",
        init="results/train/{task}/sft/seed{seed}/DONE.json",
    output:
        done="results/train/{task}/{method}/seed{seed}/DONE.json",
    params:
        code=lambda wildcards: code_digest(f"pipeline_lib.engines.local.{wildcards.method}"),
        spec=lambda wildcards: json.dumps(baseline_spec(config, wildcards.method)),
        run_dir=lambda wildcards, output: os.path.dirname(output.done),
        init_dir=lambda wildcards, input: os.path.join(os.path.dirname(input.init), "final"),
    wildcard_constraints:
        method="rl_logit|raro",
        task=LOCAL_TASK,
    log:
        "logs/train_expert_rl/{task}_{method}_seed{seed}.log",
    benchmark:
        "results/benchmarks/train_expert_rl/{task}_{method}_seed{seed}.tsv"
    threads: 1
    conda:
        "../../envs/report.yaml"
    shell:
        "python -m pipeline_lib.engines.local.{wildcards.method} --spec {params.spec:q} --data {input.data}"
        " --demonstrations {input.demonstrations} --init {params.init_dir} --run-dir {params.run_dir}"
        " --seed {wildcards.seed} --threads {threads} > {log} 2>&1"


# The OPD teacher: SFT continued for train.baselines.opd.teacher.steps (or a larger model from scratch).
rule train_opd_teacher:
    input:
        data="results/data/{task}/sft_train.parquet",
        tokenizer="results/data/tokenizer/tokenizer.json",
        init=lambda wildcards: ([f"results/train/{wildcards.task}/sft/seed{wildcards.seed}/DONE.json"]
                                if config["train"]["baselines"]["opd"]["teacher"]["init"] == "sft" else []),
    output:
        done="results/train/{task}/opd_teacher/seed{seed}/DONE.json",
    params:
        code=code_digest("pipeline_lib.engines.local.sft"),
        spec=lambda wildcards: json.dumps(opd_teacher_spec(config)),
        run_dir=lambda wildcards, output: os.path.dirname(output.done),
        tokenizer_dir=lambda wildcards, input: os.path.dirname(input.tokenizer),
        init=lambda wildcards, input: (f"--init {os.path.join(os.path.dirname(input.init[0]), 'final')}"
                                       if input.init else ""),
    wildcard_constraints:
        task=LOCAL_TASK,
    log:
        "logs/train_opd_teacher/{task}_seed{seed}.log",
    benchmark:
        "results/benchmarks/train_opd_teacher/{task}_seed{seed}.tsv"
    threads: 1
    conda:
        "../../envs/report.yaml"
    shell:
        "python -m pipeline_lib.engines.local.sft --spec {params.spec:q} --data {input.data}"
        " --tokenizer {params.tokenizer_dir} --run-dir {params.run_dir} --seed {wildcards.seed} {params.init}"
        " --kind opd_teacher --threads {threads} > {log} 2>&1"


rule train_opd:
    input:
        data="results/data/{task}/rl_train.parquet",
        init="results/train/{task}/sft/seed{seed}/DONE.json",
        teacher=lambda wildcards: ([] if config["train"]["baselines"]["opd"]["teacher"].get("hub")
                                   else opd_teacher(config, wildcards.task, wildcards.seed)),
    output:
        done="results/train/{task}/opd/seed{seed}/DONE.json",
    params:
        code=code_digest("pipeline_lib.engines.local.opd"),
        spec=json.dumps(baseline_spec(config, "opd")),
        run_dir=lambda wildcards, output: os.path.dirname(output.done),
        init_dir=lambda wildcards, input: os.path.join(os.path.dirname(input.init), "final"),
        teacher_dir=lambda wildcards, input: (os.path.join(os.path.dirname(input.teacher), "final") if input.teacher
                                              else opd_teacher(config, wildcards.task, wildcards.seed)),
    wildcard_constraints:
        task=LOCAL_TASK,
    log:
        "logs/train_opd/{task}_seed{seed}.log",
    benchmark:
        "results/benchmarks/train_opd/{task}_seed{seed}.tsv"
    threads: 1
    conda:
        "../../envs/report.yaml"
    shell:
        "python -m pipeline_lib.engines.local.opd --spec {params.spec:q} --data {input.data}"
        " --teacher {params.teacher_dir} --init {params.init_dir} --run-dir {params.run_dir}"
        " --seed {wildcards.seed} --threads {threads} > {log} 2>&1"


# --- The tau x M ablation of SoftmaxGRPO-Exact (train.ablation): one run per (tau, M) cell ----------------------


rule train_ablation:
    input:
        data="results/data/{task}/rl_train.parquet",
        init="results/train/{task}/sft/seed{seed}/DONE.json",
    output:
        done="results/train/{task}/softmax_tau{tau}_m{group}/seed{seed}/DONE.json",
    params:
        code=code_digest("pipeline_lib.engines.local.rl"),
        spec=lambda wildcards: json.dumps(ablation_run_spec(config, ablation_tau(wildcards.tau), int(wildcards.group))),
        run_dir=lambda wildcards, output: os.path.dirname(output.done),
        init_dir=lambda wildcards, input: os.path.join(os.path.dirname(input.init), "final"),
    wildcard_constraints:
        tau="[0-9]+(p[0-9]+)?",
        group="[0-9]+",
        task=LOCAL_TASK,
    log:
        "logs/train_ablation/{task}_tau{tau}_m{group}_seed{seed}.log",
    benchmark:
        "results/benchmarks/train_ablation/{task}_tau{tau}_m{group}_seed{seed}.tsv"
    threads: 1
    conda:
        "../../envs/report.yaml"
    shell:
        "python -m pipeline_lib.engines.local.rl --spec {params.spec:q} --data {input.data}"
        " --init {params.init_dir} --run-dir {params.run_dir} --seed {wildcards.seed}"
        " --threads {threads} > {log} 2>&1"


# --- The model-scale study (train.scale): SFT and the paired methods from another base model ----------------------
SCALE_NAME = "|".join(config["train"]["scale"]["models"]) or "(?!)"


rule train_scale_sft:
    input:
        data="results/data/{task}/sft_train.parquet",
        tokenizer="results/data/tokenizer/tokenizer.json",
    output:
        done="results/train/{task}/sft_at_{scale}/seed{seed}/DONE.json",
    params:
        code=code_digest("pipeline_lib.engines.local.sft"),
        spec=lambda wildcards: json.dumps(sft_run_spec(scale_config(config, wildcards.scale))),
        run_dir=lambda wildcards, output: os.path.dirname(output.done),
        tokenizer_dir=lambda wildcards, input: os.path.dirname(input.tokenizer),
    wildcard_constraints:
        scale=SCALE_NAME,
        task=LOCAL_TASK,
    log:
        "logs/train_scale_sft/{task}_{scale}_seed{seed}.log",
    benchmark:
        "results/benchmarks/train_scale_sft/{task}_{scale}_seed{seed}.tsv"
    threads: 1
    conda:
        "../../envs/report.yaml"
    shell:
        "python -m pipeline_lib.engines.local.sft --spec {params.spec:q} --data {input.data}"
        " --tokenizer {params.tokenizer_dir} --run-dir {params.run_dir} --seed {wildcards.seed}"
        " --threads {threads} > {log} 2>&1"


rule train_scale_rl:
    input:
        data=lambda wildcards: rl_train_data(config, wildcards.task, wildcards.method),
        init="results/train/{task}/sft_at_{scale}/seed{seed}/DONE.json",
    output:
        done="results/train/{task}/{method}_at_{scale}/seed{seed}/DONE.json",
    params:
        code=code_digest("pipeline_lib.engines.local.rl"),
        spec=lambda wildcards: json.dumps(rl_run_spec(scale_config(config, wildcards.scale), wildcards.method)),
        run_dir=lambda wildcards, output: os.path.dirname(output.done),
        init_dir=lambda wildcards, input: os.path.join(os.path.dirname(input.init), "final"),
    wildcard_constraints:
        method="|".join(config["train"]["methods"]),
        scale=SCALE_NAME,
        task=LOCAL_TASK,
    log:
        "logs/train_scale_rl/{task}_{method}_{scale}_seed{seed}.log",
    benchmark:
        "results/benchmarks/train_scale_rl/{task}_{method}_{scale}_seed{seed}.tsv"
    threads: 1
    conda:
        "../../envs/report.yaml"
    shell:
        "python -m pipeline_lib.engines.local.rl --spec {params.spec:q} --data {input.data}"
        " --init {params.init_dir} --run-dir {params.run_dir} --seed {wildcards.seed}"
        " --threads {threads} > {log} 2>&1"


# The same ablation and scale runs on verl for the verl tasks (the paper config): a cell is the task's
# SoftmaxGRPO-Exact run with another tau / M; a scale run is the task's run with train.verl.model replaced.
if config["train"]["engine"] == "verl":
    VERL_ONLY = "|".join(verl_tasks(config)) or "(?!)"

    rule train_verl_ablation:
        input:
            data="results/data/{task}/rl_train.parquet",
            val="results/data/{task}/rl_test.parquet",
            init="results/train/{task}/sft/seed{seed}/DONE.json",
        output:
            done="results/train/{task}/softmax_tau{tau}_m{group}/seed{seed}/DONE.json",
        params:
            code=code_digest("pipeline_lib.engines.verl.train"),
            spec=lambda wildcards: json.dumps(verl_ablation_spec(config, wildcards.task, ablation_tau(wildcards.tau),
                                                                 int(wildcards.group))),
            run_dir=lambda wildcards, output: os.path.dirname(output.done),
            init_dir=lambda wildcards, input: os.path.join(os.path.dirname(input.init), "final"),
        wildcard_constraints:
            tau="[0-9]+(p[0-9]+)?",
            group="[0-9]+",
            task=VERL_ONLY,
        resources:
            nodes=lambda wildcards: verl_slurm_resources(config, wildcards.task, "rl")["nodes"],
            gres=lambda wildcards: verl_slurm_resources(config, wildcards.task, "rl")["gres"],
        log:
            "logs/train_verl_ablation/{task}_tau{tau}_m{group}_seed{seed}.log",
        benchmark:
            "results/benchmarks/train_verl_ablation/{task}_tau{tau}_m{group}_seed{seed}.tsv"
        conda:
            "../../envs/train-verl.yaml"
        shell:
            "python -m pipeline_lib.engines.verl.train rl --spec {params.spec:q} --data {input.data}"
            " --val-data {input.val} --init {params.init_dir} --run-dir {params.run_dir} --seed {wildcards.seed}"
            " > {log} 2>&1"

    rule train_verl_scale_sft:
        input:
            data="results/data/{task}/sft_train.parquet",
        output:
            done="results/train/{task}/sft_at_{scale}/seed{seed}/DONE.json",
        params:
            code=code_digest("pipeline_lib.engines.verl.train"),
            spec=lambda wildcards: json.dumps(verl_sft_spec(scale_config(config, wildcards.scale), wildcards.task)),
            run_dir=lambda wildcards, output: os.path.dirname(output.done),
        wildcard_constraints:
            scale=SCALE_NAME,
            task=VERL_ONLY,
        resources:
            nodes=lambda wildcards: verl_slurm_resources(config, wildcards.task, "sft")["nodes"],
            gres=lambda wildcards: verl_slurm_resources(config, wildcards.task, "sft")["gres"],
        log:
            "logs/train_verl_scale_sft/{task}_{scale}_seed{seed}.log",
        benchmark:
            "results/benchmarks/train_verl_scale_sft/{task}_{scale}_seed{seed}.tsv"
        conda:
            "../../envs/train-verl.yaml"
        shell:
            "python -m pipeline_lib.engines.verl.train sft --spec {params.spec:q} --data {input.data}"
            " --run-dir {params.run_dir} --seed {wildcards.seed} > {log} 2>&1"

    rule train_verl_scale_rl:
        input:
            data=lambda wildcards: rl_train_data(config, wildcards.task, wildcards.method),
            val="results/data/{task}/rl_test.parquet",
            init="results/train/{task}/sft_at_{scale}/seed{seed}/DONE.json",
        output:
            done="results/train/{task}/{method}_at_{scale}/seed{seed}/DONE.json",
        params:
            code=code_digest("pipeline_lib.engines.verl.train"),
            spec=lambda wildcards: json.dumps(verl_rl_spec(scale_config(config, wildcards.scale), wildcards.task,
                                                           wildcards.method)),
            run_dir=lambda wildcards, output: os.path.dirname(output.done),
            init_dir=lambda wildcards, input: os.path.join(os.path.dirname(input.init), "final"),
        wildcard_constraints:
            method="|".join(config["train"]["methods"]),
            scale=SCALE_NAME,
            task=VERL_ONLY,
        resources:
            nodes=lambda wildcards: verl_slurm_resources(config, wildcards.task, "rl")["nodes"],
            gres=lambda wildcards: verl_slurm_resources(config, wildcards.task, "rl")["gres"],
        log:
            "logs/train_verl_scale_rl/{task}_{method}_{scale}_seed{seed}.log",
        benchmark:
            "results/benchmarks/train_verl_scale_rl/{task}_{method}_{scale}_seed{seed}.tsv"
        conda:
            "../../envs/train-verl.yaml"
        shell:
            "python -m pipeline_lib.engines.verl.train rl --spec {params.spec:q} --data {input.data}"
            " --val-data {input.val} --init {params.init_dir} --run-dir {params.run_dir} --seed {wildcards.seed}"
            " > {log} 2>&1"
