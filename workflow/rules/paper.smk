# Paper assembly: every table and figure, and the data each is computed from (computation separate from plotting),
# is one step of pipeline_lib.paper.steps.paper_steps: one rule running one command, each output made by exactly one rule.

from pipeline_lib.plan.groups import job_priority


for step in PAPER_STEPS:

    rule:
        name:
            step.name
        input:
            **step.inputs,
        output:
            **{key: report(path, caption=f"../report/{step.reports[key][0]}", category=step.reports[key][1])
               if key in step.reports else path for key, path in step.outputs.items()},
        params:
            code=code_digest(step.code_module),
            command=step.command(),
            **step.params,
        log:
            f"logs/{step.name}.log",
        benchmark:
            f"results/benchmarks/{step.name}.tsv"
        priority: job_priority(step.name)
        conda:
            "../../envs/cpu-steps.yaml"
        shell:
            "{params.command} > {log} 2>&1"
