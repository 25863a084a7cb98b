# Stage "judge": the non-verifiable tasks' held-out generations scored by a primary and a second judge,
# cross-judge agreement, and the blind human calibration (export a rating page; import completed ratings).
# LLM judges hold `judge_requests` (their request concurrency) of the global resource the profiles cap,
# so parallel scoring jobs share one endpoint's budget.

from pipeline_lib.targets import (
    JUDGES,
    calibration_ratings,
    judge_concurrency,
    judge_ours,
    judge_rubric,
    judge_rubric_prompt,
    judge_score_files,
    judge_spec,
    judge_summaries,
    transfer_targets,
    validate_judges,
)

if config["judge"]["tasks"]:
    validate_judges(config)


rule judge_score:
    input:
        generations="results/eval/{task}/{method}/seed{seed}/generations.jsonl",
        data="results/data/{task}/rl_test.parquet",
        rubric_prompt=lambda wildcards: judge_rubric_prompt(config, wildcards.task),
    output:
        scores="results/judge/{judge}/{task}/{method}/seed{seed}/scores.jsonl",
        summary="results/judge/{judge}/{task}/{method}/seed{seed}/summary.json",
    params:
        code=code_digest("pipeline_lib.judge.score"),
        judge=lambda wildcards: json.dumps(judge_spec(config, wildcards.judge)),
        rubric=lambda wildcards: judge_rubric(config, wildcards.task),
        mode=config["judge"]["mode"],
        cache=lambda wildcards: f"results/judge/cache/{wildcards.judge}.sqlite",
        out_dir=lambda wildcards, output: os.path.dirname(output.summary),
    wildcard_constraints:
        judge="|".join(JUDGES),
    resources:
        judge_requests=lambda wildcards: judge_concurrency(config, wildcards.judge),
    log:
        "logs/judge_score/{judge}_{task}_{method}_seed{seed}.log",
    benchmark:
        "results/benchmarks/judge_score/{judge}_{task}_{method}_seed{seed}.tsv"
    conda:
        "../../envs/judge.yaml"
    shell:
        "python -m pipeline_lib.judge.score --judge {params.judge:q} --rubric {params.rubric}"
        " --generations {input.generations} --data {input.data} --mode {params.mode} --cache {params.cache}"
        " --out {params.out_dir} > {log} 2>&1"


rule judge_cross:
    input:
        primary=lambda wildcards: judge_summaries(config, "primary", wildcards.task),
        second=lambda wildcards: judge_summaries(config, "second", wildcards.task),
    output:
        "results/judge/cross/{task}.json",
    params:
        code=code_digest("pipeline_lib.judge.cross"),
        methods=config["judge"]["methods"],
    log:
        "logs/judge_cross/{task}.log",
    benchmark:
        "results/benchmarks/judge_cross/{task}.tsv"
    conda:
        "../../envs/report.yaml"
    shell:
        "python -m pipeline_lib.judge.cross --primary {input.primary} --second {input.second}"
        " --methods {params.methods} --out {output} > {log} 2>&1"


rule judge_calibration_export:
    input:
        scores=lambda wildcards: judge_score_files(config, wildcards.task),
        data="results/data/{task}/rl_test.parquet",
    output:
        sheet="results/judge/calibration/{task}/items.csv",
        page="results/judge/calibration/{task}/rate.html",
        key="results/judge/calibration/{task}/key/key.csv",
    params:
        code=code_digest("pipeline_lib.judge.calibration"),
        rubric=lambda wildcards: judge_rubric(config, wildcards.task),
        size=config["judge"]["calibration"]["items_per_task"],
        seed=config["judge"]["calibration"]["seed"],
        out_dir=lambda wildcards, output: os.path.dirname(output.sheet),
    log:
        "logs/judge_calibration_export/{task}.log",
    benchmark:
        "results/benchmarks/judge_calibration_export/{task}.tsv"
    conda:
        "../../envs/report.yaml"
    shell:
        "python -m pipeline_lib.judge.calibration export --task {wildcards.task} --rubric {params.rubric}"
        " --scores {input.scores} --data {input.data} --size {params.size} --seed {params.seed}"
        " --out {params.out_dir} > {log} 2>&1"


rule judge_calibration_import:
    input:
        key=rules.judge_calibration_export.output.key,
        scores=lambda wildcards: judge_score_files(config, wildcards.task),
        ratings=lambda wildcards: calibration_ratings(config, wildcards.task),
    output:
        "results/judge/calibration/{task}/agreement.json",
    params:
        code=code_digest("pipeline_lib.judge.calibration"),
        rubric=lambda wildcards: judge_rubric(config, wildcards.task),
        ratings=lambda wildcards: config["judge"]["calibration"]["ratings"].get(wildcards.task) or "",
    log:
        "logs/judge_calibration_import/{task}.log",
    benchmark:
        "results/benchmarks/judge_calibration_import/{task}.tsv"
    conda:
        "../../envs/report.yaml"
    shell:
        "python -m pipeline_lib.judge.calibration import --rubric {params.rubric} --key {input.key}"
        " --scores {input.scores} --ratings={params.ratings:q} --out {output} > {log} 2>&1"
