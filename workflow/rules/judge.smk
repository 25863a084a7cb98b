# Stage "judge": the non-verifiable tasks' held-out generations scored by a primary and a second judge,
# cross-judge agreement, and the blind human calibration (export a rating page; import completed ratings).
# LLM judges hold `judge_requests` (their request concurrency) of the global resource the profiles cap,
# so parallel scoring jobs share one endpoint's budget. A served judge (`serve.command`) is started inside
# judge_score only if some item is not in the judge's response cache. The judged runs: the plan's judge study
# (common.smk); cross and calibration get each file's run from the plan (a runs file), never from its path.

from pipeline_lib.core.cli import with_files
from pipeline_lib.paper.steps import calibration_pairwise_inputs
from pipeline_lib.plan.judges import (JUDGES, calibration_ratings, judge_concurrency, judge_rubric_prompt,
                                      pairwise_rubric_prompt, validate_judges)

if PLAN.requests.get("judge"):
    validate_judges(config)


rule judge_score:
    input:
        generations="results/eval/{task}/{method}/seed{seed}/generations.jsonl",
        data="results/data/{task}/rl_test.parquet",
        rubric_prompt=lambda wildcards: judge_rubric_prompt(config, wildcards.task),
        canary=after_canary("judge_score"),
        fetched=after_fetch,  # a served judge's model, from the cache
    output:
        scores="results/judge/{judge}/{task}/{method}/seed{seed}/scores.jsonl",
        summary="results/judge/{judge}/{task}/{method}/seed{seed}/summary.json",
    params:
        code=code_digest("pipeline_lib.jobs.judge.score"),
        **with_files(judge_params(config, PLAN, "score"), "judge"),
    wildcard_constraints:
        judge=pattern(JUDGES),
    resources:
        judge_requests=lambda wildcards: judge_concurrency(config, wildcards.judge),
    log:
        "logs/judge_score/{judge}_{task}_{method}_seed{seed}.log",
    benchmark:
        "results/benchmarks/judge_score/{judge}_{task}_{method}_seed{seed}.tsv"
    conda:
        "../../envs/judge.yaml"
    shell:
        "python -m pipeline_lib.jobs.judge.score --judge {params.judge_file} --rubric {params.rubric}"
        " --generations {input.generations} --data {input.data} --mode {params.mode} --cache {params.cache}"
        " --out {params.out_dir} > {log} 2>&1"


# The same judge against the task's expert reference (judge.pairwise: Poetry in the paper), each item in both orders;
# its summary's score_100 is the win rate. Beside the isolated scores, in a pairwise/ folder.
rule judge_score_pairwise:
    input:
        generations="results/eval/{task}/{method}/seed{seed}/generations.jsonl",
        data="results/data/{task}/rl_test.parquet",
        rubric_prompt=lambda wildcards: pairwise_rubric_prompt(config, wildcards.task),
        canary=after_canary("judge_score_pairwise"),
        fetched=after_fetch,  # a served judge's model, from the cache
    output:
        scores="results/judge/{judge}/{task}/{method}/seed{seed}/pairwise/scores.jsonl",
        summary="results/judge/{judge}/{task}/{method}/seed{seed}/pairwise/summary.json",
    params:
        code=code_digest("pipeline_lib.jobs.judge.score"),
        **with_files(judge_params(config, PLAN, "pairwise"), "judge"),
    wildcard_constraints:
        judge=pattern(JUDGES),
    resources:
        judge_requests=lambda wildcards: judge_concurrency(config, wildcards.judge),
    log:
        "logs/judge_score_pairwise/{judge}_{task}_{method}_seed{seed}.log",
    benchmark:
        "results/benchmarks/judge_score_pairwise/{judge}_{task}_{method}_seed{seed}.tsv"
    conda:
        "../../envs/judge.yaml"
    shell:
        "python -m pipeline_lib.jobs.judge.score --judge {params.judge_file} --rubric {params.rubric} --pairwise"
        " --generations {input.generations} --data {input.data} --mode {params.mode} --cache {params.cache}"
        " --out {params.out_dir} > {log} 2>&1"


rule judge_cross:
    input:
        **judge_inputs(PLAN, "cross"),
    output:
        "results/judge/cross/{task}.json",
    params:
        code=code_digest("pipeline_lib.jobs.judge.cross"),
        **with_files(judge_params(config, PLAN, "cross"), *JUDGES),
    log:
        "logs/judge_cross/{task}.log",
    benchmark:
        "results/benchmarks/judge_cross/{task}.tsv"
    conda:
        "../../envs/cpu-steps.yaml"
    shell:
        "python -m pipeline_lib.jobs.judge.cross --primary {params.primary_file} --second {params.second_file}"
        " --methods {params.methods} --out {output} > {log} 2>&1"


# The two judges' agreement on the scores against the expert reference (judge.pairwise tasks).
rule judge_cross_pairwise:
    input:
        **judge_inputs(PLAN, "cross_pairwise"),
    output:
        "results/judge/cross/pairwise/{task}.json",
    params:
        code=code_digest("pipeline_lib.jobs.judge.cross"),
        **with_files(judge_params(config, PLAN, "cross_pairwise"), *JUDGES),
    log:
        "logs/judge_cross_pairwise/{task}.log",
    benchmark:
        "results/benchmarks/judge_cross_pairwise/{task}.tsv"
    conda:
        "../../envs/cpu-steps.yaml"
    shell:
        "python -m pipeline_lib.jobs.judge.cross --primary {params.primary_file} --second {params.second_file}"
        " --methods {params.methods} --out {output} > {log} 2>&1"


rule judge_calibration_export:
    input:
        **judge_inputs(PLAN, "calibration"),
        data="results/data/{task}/rl_test.parquet",
    output:
        sheet="results/judge/calibration/{task}/items.csv",
        page="results/judge/calibration/{task}/rate.html",
        key="results/judge/calibration/{task}/key/key.csv",
    params:
        code=code_digest("pipeline_lib.jobs.judge.calibration"),
        **with_files(judge_params(config, PLAN, "export"), "scores"),
    log:
        "logs/judge_calibration_export/{task}.log",
    benchmark:
        "results/benchmarks/judge_calibration_export/{task}.tsv"
    conda:
        "../../envs/cpu-steps.yaml"
    shell:
        "python -m pipeline_lib.jobs.judge.calibration export --task {wildcards.task} --rubric {params.rubric}"
        " --scores {params.scores_file} --data {input.data} --size {params.size} --seed {params.seed}"
        " --out {params.out_dir} > {log} 2>&1"


rule judge_calibration_import:
    input:
        key=rules.judge_calibration_export.output.key,
        **judge_inputs(PLAN, "calibration"),
        ratings=lambda wildcards: calibration_ratings(config, wildcards.task),
        pairwise=calibration_pairwise_inputs(config, PLAN),
    output:
        "results/judge/calibration/{task}/agreement.json",
    params:
        code=code_digest("pipeline_lib.jobs.judge.calibration"),
        **with_files(judge_params(config, PLAN, "import"), "scores", "pairwise_scores"),
    log:
        "logs/judge_calibration_import/{task}.log",
    benchmark:
        "results/benchmarks/judge_calibration_import/{task}.tsv"
    conda:
        "../../envs/cpu-steps.yaml"
    shell:
        "python -m pipeline_lib.jobs.judge.calibration import --rubric {params.rubric} --key {input.key}"
        " --scores {params.scores_file} --pairwise-scores {params.pairwise_scores_file} --ratings={params.ratings:q}"
        " --out {output} > {log} 2>&1"
