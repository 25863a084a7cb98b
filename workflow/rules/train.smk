# Stage "train": one rule per kind of job (pipeline_lib.plan.JOBS: train_local, train_verl, train_trl,
# annotate_rationales, train_imagenet), plus the group rules below (several runs in one job). Which runs exist, and
# each one's inputs, command, spec and resources, come from the run plan (PLAN = pipeline_lib.plan.plan_runs(config));
# a rule matches exactly its own runs (`run` = <task>/<name>/seed<N>). Each run owns its directory; DONE.json is the sentinel. Site resources (CPUs,
# memory, runtime, partition) per rule: profiles/slurm.

from pipeline_lib.core.attempts import ATTEMPT_ENV
from pipeline_lib.core.cli import json_file
from pipeline_lib.plan.estimates import SITE_TIMED, rule_retries, site_settings
from pipeline_lib.plan.groups import job_priority, train_group_command, train_group_inputs

RETRIES = rule_retries(config, PLAN)  # resubmissions for each GPU rule's longest run (None: the profile's)

for job, kind in JOBS.items():

    rule:
        name:
            job
        input:
            unpack(lambda wildcards, job=job: PLAN.get(job, wildcards.run).inputs),
            after=lambda wildcards, job=job: [ancient(path) for path in PLAN.get(job, wildcards.run).after],
            canary=after_canary(job),
            fetched=lambda wildcards, job=job: after_fetch(wildcards) if reads_hub(PLAN.get(job, wildcards.run)) else [],
        output:
            f"results/train/{{run}}/{kind.output}",
        params:
            command=lambda wildcards, threads, job=job: PLAN.get(job, wildcards.run).command(threads),
            # the run's command without --threads: Snakemake compares only parameters not derived from threads,
            # input or output, so this is what reruns a job whose spec changed (not --tracking: a new dashboard
            # retrains nothing)
            run=lambda wildcards, job=job: PLAN.get(job, wildcards.run).command(tracking=False, files=False),
            code=lambda wildcards, job=job: code_digest(PLAN.get(job, wildcards.run).entry_module),
        wildcard_constraints:
            run=PLAN.pattern(job),
        resources:
            **{name: (lambda wildcards, job=job, name=name: PLAN.get(job, wildcards.run).resources[name])
               for name in kind.resources},
            # the partition's MaxTime on every attempt (a resubmission resumes; profiles/slurm sets no runtime here)
            **({"runtime": site_settings(config)["max_runtime_min"]} if job in SITE_TIMED else {}),
            # Snakemake's attempt, for the job's record of why each attempt ended: a resubmission runs after a time
            # limit as often as `retries` allows, after any other failure once (pipeline_lib.core.attempts)
            # (every rule of the loop: its shell line runs when the job runs, when `job` is the loop's last value)
            attempt=lambda wildcards, attempt: attempt,
        retries: RETRIES.get(job)
        log:
            f"logs/{job}/{{run}}.log",
        benchmark:
            f"results/benchmarks/{job}/{{run}}.tsv"
        priority: lambda wildcards, job=job: job_priority(job, PLAN.get(job, wildcards.run))
        threads: 1
        conda:
            f"../../envs/{kind.conda}"
        shell:
            f"{ATTEMPT_ENV}={{resources.attempt}} {{params.command}} > {{log}} 2>&1"


# Runs of one (task, seed) on the local engine that start from the same SFT model, one after another in one process
# (one start-up instead of one per run; pipeline_lib.plan.groups): train_local_group, every train.methods run;
# train_ablation_group, the tau x M ablation's cells; train_imagenet_group (imagenet.one_job_per_seed), the ImageNet
# study's runs of one seed. The same runs, commands and outputs as their own jobs (train_local, train_imagenet),
# which these rules take over (ruleorder). A change to one of them reruns its group.
for group_rule, group in TRAIN_GROUPS.items():

    rule:
        name:
            group_rule
        input:
            unpack(lambda wildcards, group=group: train_group_inputs(group.runs(PLAN, wildcards.task, wildcards.seed))),
            fetched=lambda wildcards, group=group: after_fetch(wildcards) if any(
                reads_hub(run) for run in group.runs(PLAN, wildcards.task, wildcards.seed)) else [],
        output:
            expand("results/train/{{task}}/{method}/seed{{seed}}/DONE.json", method=group.methods),
        params:
            command=lambda wildcards, threads, group=group: train_group_command(
                group.runs(PLAN, wildcards.task, wildcards.seed), threads),
            run=lambda wildcards, group=group: "\n".join(
                run.command(tracking=False, files=False) for run in group.runs(PLAN, wildcards.task, wildcards.seed)),
            code=lambda wildcards, group=group: " ".join(dict.fromkeys(
                code_digest(run.entry_module) for run in group.runs(PLAN, wildcards.task, wildcards.seed))),
        wildcard_constraints:
            task=pattern(group.tasks),
            seed=pattern(group.seeds),
        log:
            f"logs/{group_rule}/{{task}}_seed{{seed}}.log",
        benchmark:
            f"results/benchmarks/{group_rule}/{{task}}_seed{{seed}}.tsv"
        priority: job_priority(group_rule)
        threads: 1
        conda:
            "../../envs/train-local.yaml"
        shell:
            "{params.command} 3>&2 > {log} 2>&1"  # fd 3: the batch's one line per member, to the console

    workflow.ruleorder(group_rule, group.job)


# verl's own checks of every verl run (validate_config, its dataclass configs, the estimator through
# compute_advantage, the reward function, agent loops, the OPD teacher): on the submitting machine, before any verl
# job starts (they wait for its output). `snakemake -n` checks every override key (common.smk).
localrules:
    validate_verl,


rule validate_verl:
    input:
        fetched=after_fetch,  # verl's model configs read the runs' hub models (offline, from the cache)
    output:
        VERL_CHECKED,
    params:
        runs=VERL_RUNS_DIGEST,
        code=code_digest("pipeline_lib.jobs.engines.verl.validate"),
        config=lambda wildcards: json.dumps(config),
        config_file=lambda wildcards: json_file(json.dumps(config)),  # the same JSON, in a file: not on the command line
    log:
        "logs/validate_verl.log",
    benchmark:
        "results/benchmarks/validate_verl.tsv"
    conda:
        "../../envs/train-verl.yaml"
    shell:
        "python -m pipeline_lib.jobs.engines.verl.validate --config {params.config_file} --out {output} > {log} 2>&1"
