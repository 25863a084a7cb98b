# Stage "train": one rule per kind of job (pipeline_lib.plan.JOBS: train_local, train_verl, train_trl,
# annotate_rationales, train_imagenet), plus train_local_group (below). Which runs exist, and each one's inputs,
# command, spec and resources, come from the run plan (PLAN = pipeline_lib.plan.plan_runs(config)); a rule matches exactly its own runs
# (`run` = <task>/<name>/seed<N>). Each run owns its directory; DONE.json is the sentinel. Site resources (CPUs,
# memory, runtime, partition) per rule: profiles/slurm.

from pipeline_lib.plan.groups import train_group_command, train_group_inputs, train_group_runs

for job, kind in JOBS.items():

    rule:
        name:
            job
        input:
            unpack(lambda wildcards, job=job: PLAN.get(job, wildcards.run).inputs),
            after=lambda wildcards, job=job: [ancient(path) for path in PLAN.get(job, wildcards.run).after],
        output:
            f"results/train/{{run}}/{kind.output}",
        params:
            command=lambda wildcards, threads, job=job: PLAN.get(job, wildcards.run).command(threads),
            # the run's command without --threads: Snakemake compares only parameters not derived from threads,
            # input or output, so this is what reruns a job whose spec changed
            run=lambda wildcards, job=job: PLAN.get(job, wildcards.run).command(),
            code=lambda wildcards, job=job: code_digest(PLAN.get(job, wildcards.run).entry_module),
        wildcard_constraints:
            run=PLAN.pattern(job),
        resources:
            **{name: (lambda wildcards, job=job, name=name: PLAN.get(job, wildcards.run).resources[name])
               for name in kind.resources},
        log:
            f"logs/{job}/{{run}}.log",
        benchmark:
            f"results/benchmarks/{job}/{{run}}.tsv"
        threads: 1
        conda:
            f"../../envs/{kind.conda}"
        shell:
            "{params.command} > {log} 2>&1"


# Every train.methods run of one (task, seed) on the local engine, one after another in one process (one start-up
# instead of five; pipeline_lib.plan.groups): the same runs, commands and outputs as their train_local jobs, which
# this rule takes over (ruleorder). A change to one of them reruns the group.
rule train_local_group:
    input:
        unpack(lambda wildcards: train_group_inputs(train_group_runs(PLAN, wildcards.task, wildcards.seed,
                                                                     GROUPS.methods))),
    output:
        expand("results/train/{{task}}/{method}/seed{{seed}}/DONE.json", method=GROUPS.methods),
    params:
        command=lambda wildcards, threads: train_group_command(
            train_group_runs(PLAN, wildcards.task, wildcards.seed, GROUPS.methods), threads),
        run=lambda wildcards: "\n".join(run.command() for run in train_group_runs(PLAN, wildcards.task,
                                                                                  wildcards.seed, GROUPS.methods)),
        code=lambda wildcards: " ".join(dict.fromkeys(code_digest(run.entry_module) for run in train_group_runs(
            PLAN, wildcards.task, wildcards.seed, GROUPS.methods))),
    wildcard_constraints:
        task=GROUPS.pattern(GROUPS.tasks),
        seed=GROUPS.pattern(GROUPS.seeds),
    log:
        "logs/train_local_group/{task}_seed{seed}.log",
    benchmark:
        "results/benchmarks/train_local_group/{task}_seed{seed}.tsv"
    threads: 1
    conda:
        "../../envs/report.yaml"
    shell:
        "{params.command} > {log} 2>&1"


ruleorder: train_local_group > train_local


# verl's own checks of every verl run (validate_config, its dataclass configs, the estimator through
# compute_advantage, the reward function, agent loops, the OPD teacher): on the submitting machine, before any verl
# job starts (they wait for its output). `snakemake -n` checks every override key (common.smk).
localrules:
    validate_verl,


rule validate_verl:
    output:
        VERL_CHECKED,
    params:
        runs=VERL_RUNS_DIGEST,
        code=code_digest("pipeline_lib.engines.verl.validate"),
        config=lambda wildcards: json.dumps(config),
    log:
        "logs/validate_verl.log",
    benchmark:
        "results/benchmarks/validate_verl.tsv"
    conda:
        "../../envs/train-verl.yaml"
    shell:
        "python -m pipeline_lib.engines.verl.validate --config {params.config:q} --out {output} > {log} 2>&1"
