# Paper assembly: every table and figure is made by exactly one rule, and
# computation (Monte Carlo, aggregation) is separate from plotting.


rule paper_theory_data:
    output:
        curves="results/paper/data/theory_curves.csv",
        weights="results/paper/data/theory_weights.csv",
        weight_view="results/paper/data/weight_view.csv",
        verification_json="results/paper/theory_verification.json",
        verification_md=report(
            "results/paper/theory_verification.md",
            caption="../report/theory_verification.rst",
            category="Theory",
        ),
    params:
        code=code_digest("pipeline_lib.theory.compute"),
        spec=json.dumps(config["theory"]),
        seed=config["seed"],
        config_sha256=CONFIG_SHA256,
    log:
        "logs/paper_theory_data.log",
    benchmark:
        "results/benchmarks/paper_theory_data.tsv"
    conda:
        "../../envs/report.yaml"
    shell:
        "python -m pipeline_lib.theory.compute --spec {params.spec:q} --seed {params.seed}"
        " --config-sha256 {params.config_sha256} --curves {output.curves} --weights {output.weights}"
        " --weight-view {output.weight_view} --verification-json {output.verification_json}"
        " --verification-md {output.verification_md} > {log} 2>&1"


rule paper_theory:
    input:
        curves=rules.paper_theory_data.output.curves,
        weights=rules.paper_theory_data.output.weights,
        weight_view=rules.paper_theory_data.output.weight_view,
    output:
        fig1a_png=report(
            "results/paper/figures/fig1a_advantage_magnitude.png",
            caption="../report/fig1a.rst",
            category="Theory",
        ),
        fig1a_pdf="results/paper/figures/fig1a_advantage_magnitude.pdf",
        fig1b_png=report(
            "results/paper/figures/fig1b_weight_functions.png",
            caption="../report/fig1b.rst",
            category="Theory",
        ),
        fig1b_pdf="results/paper/figures/fig1b_weight_functions.pdf",
        table_csv="results/paper/tables/weight_view.csv",
        table_md=report(
            "results/paper/tables/weight_view.md",
            caption="../report/weight_view.rst",
            category="Theory",
        ),
        table_tex="results/paper/tables/weight_view.tex",
    params:
        code=code_digest("pipeline_lib.paper.theory"),
        group_size=config["theory"]["group_size"],
        table_stem=lambda wildcards, output: output.table_csv.removesuffix(".csv"),
    log:
        "logs/paper_theory.log",
    benchmark:
        "results/benchmarks/paper_theory.tsv"
    conda:
        "../../envs/report.yaml"
    shell:
        "python -m pipeline_lib.paper.theory --group-size {params.group_size}"
        " --curves {input.curves} --weights {input.weights} --weight-view {input.weight_view}"
        " --fig1a-png {output.fig1a_png} --fig1a-pdf {output.fig1a_pdf} --fig1b-png {output.fig1b_png}"
        " --fig1b-pdf {output.fig1b_pdf} --table-stem {params.table_stem} > {log} 2>&1"


rule paper_imagenet_data:
    input:
        done=runs_of(PLAN, "imagenet"),
    output:
        curves="results/paper/data/imagenet_curves.csv",
        summary="results/paper/data/imagenet_summary.csv",
    log:
        "logs/paper_imagenet_data.log",
    benchmark:
        "results/benchmarks/paper_imagenet_data.tsv"
    conda:
        "../../envs/report.yaml"
    params:
        code=code_digest("pipeline_lib.classify.report"),
    shell:
        "python -m pipeline_lib.classify.report collect --done {input.done} --curves {output.curves}"
        " --summary {output.summary} > {log} 2>&1"


rule paper_imagenet:
    input:
        curves=rules.paper_imagenet_data.output.curves,
        summary=rules.paper_imagenet_data.output.summary,
    output:
        png=report(
            "results/paper/figures/imagenet_objectives.png",
            caption="../report/imagenet.rst",
            category="ImageNet objective study",
        ),
        pdf="results/paper/figures/imagenet_objectives.pdf",
        table_csv="results/paper/tables/imagenet_objectives.csv",
        table_md=report(
            "results/paper/tables/imagenet_objectives.md",
            caption="../report/imagenet_table.rst",
            category="ImageNet objective study",
        ),
        table_tex="results/paper/tables/imagenet_objectives.tex",
    params:
        code=code_digest("pipeline_lib.classify.report"),
        label=config["imagenet"]["label"],
        table_stem=lambda wildcards, output: output.table_csv.removesuffix(".csv"),
    log:
        "logs/paper_imagenet.log",
    benchmark:
        "results/benchmarks/paper_imagenet.tsv"
    conda:
        "../../envs/report.yaml"
    shell:
        "python -m pipeline_lib.classify.report render --curves {input.curves} --summary {input.summary}"
        " --label {params.label:q} --png {output.png} --pdf {output.pdf} --table-stem {params.table_stem}"
        " > {log} 2>&1"


rule paper_table1_data:
    input:
        metrics=table1_eval_targets(config, PLAN),
    output:
        csv="results/paper/data/table1.csv",
    log:
        "logs/paper_table1_data.log",
    benchmark:
        "results/benchmarks/paper_table1_data.tsv"
    conda:
        "../../envs/report.yaml"
    params:
        code=code_digest("pipeline_lib.paper.results"),
    shell:
        "python -m pipeline_lib.paper.results table1-data --metrics {input.metrics} --out {output.csv} > {log} 2>&1"


rule paper_table1:
    input:
        csv=rules.paper_table1_data.output.csv,
    output:
        tex="results/paper/tables/table1.tex",
        md=report("results/paper/tables/table1.md", caption="../report/table1.rst", category="Results"),
        csv="results/paper/tables/table1.csv",
    params:
        code=code_digest("pipeline_lib.paper.results"),
        label=config["label"],
        stem=lambda wildcards, output: output.csv.removesuffix(".csv"),
    log:
        "logs/paper_table1.log",
    benchmark:
        "results/benchmarks/paper_table1.tsv"
    conda:
        "../../envs/report.yaml"
    shell:
        "python -m pipeline_lib.paper.results table1 --data {input.csv} --label {params.label}"
        " --stem {params.stem} > {log} 2>&1"


rule paper_gradient_allocation_data:
    input:
        done=rl_runs(PLAN, ["grpo_exact", "softmax_exact"]),
    output:
        csv="results/paper/data/gradient_allocation.csv",
    params:
        code=code_digest("pipeline_lib.paper.results"),
        rollouts=lambda wildcards, input: [os.path.join(os.path.dirname(d), "rollouts.jsonl") for d in input.done],
    log:
        "logs/paper_gradient_allocation_data.log",
    benchmark:
        "results/benchmarks/paper_gradient_allocation_data.tsv"
    conda:
        "../../envs/report.yaml"
    shell:
        "python -m pipeline_lib.paper.results allocation-data --rollouts {params.rollouts} --out {output.csv}"
        " > {log} 2>&1"


rule paper_gradient_allocation:
    input:
        csv=rules.paper_gradient_allocation_data.output.csv,
    output:
        tex="results/paper/tables/gradient_allocation.tex",
        md=report(
            "results/paper/tables/gradient_allocation.md",
            caption="../report/gradient_allocation.rst",
            category="Results",
        ),
        csv="results/paper/tables/gradient_allocation.csv",
    params:
        code=code_digest("pipeline_lib.paper.results"),
        label=config["label"],
        stem=lambda wildcards, output: output.csv.removesuffix(".csv"),
    log:
        "logs/paper_gradient_allocation.log",
    benchmark:
        "results/benchmarks/paper_gradient_allocation.tsv"
    conda:
        "../../envs/report.yaml"
    shell:
        "python -m pipeline_lib.paper.results allocation --data {input.csv} --label {params.label}"
        " --stem {params.stem} > {log} 2>&1"


rule paper_training_curves:
    input:
        done=rl_runs(PLAN),
    output:
        png=report(
            "results/paper/figures/training_curves.png",
            caption="../report/training_curves.rst",
            category="Results",
        ),
        pdf="results/paper/figures/training_curves.pdf",
    params:
        code=code_digest("pipeline_lib.paper.results"),
        metrics=lambda wildcards, input: [os.path.join(os.path.dirname(d), "metrics.jsonl") for d in input.done],
        label=config["label"],
    log:
        "logs/paper_training_curves.log",
    benchmark:
        "results/benchmarks/paper_training_curves.tsv"
    conda:
        "../../envs/report.yaml"
    shell:
        "python -m pipeline_lib.paper.results curves --metrics {params.metrics} --label {params.label}"
        " --png {output.png} --pdf {output.pdf} > {log} 2>&1"


rule paper_reproduction_report:
    input:
        reference="config/paper_reference.yaml",
        table1=rules.paper_table1_data.output.csv,
        allocation=rules.paper_gradient_allocation_data.output.csv,
        generations=REPORT_INPUTS["generations"],
        summaries=REPORT_INPUTS["summaries"],
        made=[pair.split("=", 1)[1] for pair in REPORT_INPUTS["made"]],
        test_data=REPORT_INPUTS["test_data"],
    output:
        report=report(
            "results/paper/reproduction_report.md",
            caption="../report/reproduction_report.rst",
            category="Reproduction",
        ),
    params:
        code=code_digest("pipeline_lib.paper.reproduction"),
        label=config["label"],
        made=REPORT_INPUTS["made"],
        min_seeds=config["report"]["min_seeds"],
    log:
        "logs/paper_reproduction_report.log",
    benchmark:
        "results/benchmarks/paper_reproduction_report.tsv"
    conda:
        "../../envs/report.yaml"
    shell:
        "python -m pipeline_lib.paper.reproduction --reference {input.reference} --label {params.label}"
        " --table1 {input.table1} --allocation {input.allocation} --eval-root results/eval"
        " --train-root results/train"
        " --judge-summaries {input.summaries} --made {params.made} --min-seeds {params.min_seeds}"
        " --test-data {input.test_data}"
        " --out {output.report} > {log} 2>&1"


rule paper_audit:
    input:
        table="results/paper/tables/table1.tex",
    output:
        audit=report("results/paper/audit_table1.txt", caption="../report/audit.rst", category="Provenance"),
    log:
        "logs/paper_audit.log",
    benchmark:
        "results/benchmarks/paper_audit.tsv"
    conda:
        "../../envs/report.yaml"
    params:
        code=code_digest("pipeline_lib.__main__"),
    shell:
        "python -m pipeline_lib audit {input.table} --out {output.audit} --no-fail > {log} 2>&1"


rule paper_nonverifiable:
    input:
        summaries=lambda wildcards: [path for task in config["judge"]["tasks"]
                                     for path in judge_summaries(config, "primary", task)],
        transfer=transfer_targets(config),
    output:
        tex="results/paper/tables/nonverifiable.tex",
        md=report("results/paper/tables/nonverifiable.md", caption="../report/nonverifiable.rst", category="Results"),
        csv="results/paper/tables/nonverifiable.csv",
    params:
        code=code_digest("pipeline_lib.paper.judging"),
        methods=config["judge"]["methods"],
        label=config["label"],
        stem=lambda wildcards, output: output.csv.removesuffix(".csv"),
    log:
        "logs/paper_nonverifiable.log",
    benchmark:
        "results/benchmarks/paper_nonverifiable.tsv"
    conda:
        "../../envs/report.yaml"
    shell:
        "python -m pipeline_lib.paper.judging nonverifiable --summaries {input.summaries} --methods {params.methods}"
        " --transfer {input.transfer} --label {params.label} --stem {params.stem} > {log} 2>&1"


rule paper_judge_validation:
    input:
        cross=expand("results/judge/cross/{task}.json", task=list(config["judge"]["tasks"])),
        agreement=expand("results/judge/calibration/{task}/agreement.json", task=list(config["judge"]["tasks"])),
    output:
        tex="results/paper/tables/judge_validation.tex",
        md=report("results/paper/tables/judge_validation.md", caption="../report/judge_validation.rst",
                  category="Results"),
        csv="results/paper/tables/judge_validation.csv",
    params:
        code=code_digest("pipeline_lib.paper.judging"),
        ours=judge_ours(config),
        label=config["label"],
        stem=lambda wildcards, output: output.csv.removesuffix(".csv"),
    log:
        "logs/paper_judge_validation.log",
    benchmark:
        "results/benchmarks/paper_judge_validation.tsv"
    conda:
        "../../envs/report.yaml"
    shell:
        "python -m pipeline_lib.paper.judging validation --cross {input.cross} --agreement {input.agreement}"
        " --ours {params.ours} --label {params.label} --stem {params.stem} > {log} 2>&1"


rule paper_ablation_data:
    input:
        metrics=ablation_eval_targets(PLAN),
    output:
        csv="results/paper/data/ablation.csv",
    log:
        "logs/paper_ablation_data.log",
    benchmark:
        "results/benchmarks/paper_ablation_data.tsv"
    conda:
        "../../envs/report.yaml"
    params:
        code=code_digest("pipeline_lib.paper.ablation"),
    shell:
        "python -m pipeline_lib.paper.ablation data --metrics {input.metrics} --out {output.csv} > {log} 2>&1"


rule paper_ablation:
    input:
        csv=rules.paper_ablation_data.output.csv,
    output:
        tex="results/paper/tables/ablation.tex",
        md=report("results/paper/tables/ablation.md", caption="../report/ablation.rst", category="Results"),
        csv="results/paper/tables/ablation.csv",
    params:
        code=code_digest("pipeline_lib.paper.ablation"),
        label=config["label"],
        stem=lambda wildcards, output: output.csv.removesuffix(".csv"),
        differences=json.dumps(ablation_differences(PLAN)),
    log:
        "logs/paper_ablation.log",
    benchmark:
        "results/benchmarks/paper_ablation.tsv"
    conda:
        "../../envs/report.yaml"
    shell:
        "python -m pipeline_lib.paper.ablation table --data {input.csv} --label {params.label}"
        " --stem {params.stem} --differences {params.differences:q} > {log} 2>&1"


rule paper_scale_data:
    input:
        metrics=lambda wildcards: scale_eval_targets(PLAN),
    output:
        csv="results/paper/data/scale.csv",
    params:
        code=code_digest("pipeline_lib.paper.scale"),
        main_label=config["train"]["scale"]["label"],
        labels=json.dumps({name: spec.get("label", name) for name, spec in config["train"]["scale"]["models"].items()}),
    log:
        "logs/paper_scale_data.log",
    benchmark:
        "results/benchmarks/paper_scale_data.tsv"
    conda:
        "../../envs/report.yaml"
    shell:
        "python -m pipeline_lib.paper.scale data --metrics {input.metrics} --main-label {params.main_label:q}"
        " --labels {params.labels:q} --out {output.csv} > {log} 2>&1"


rule paper_scale:
    input:
        csv=rules.paper_scale_data.output.csv,
    output:
        tex="results/paper/tables/scale.tex",
        md=report("results/paper/tables/scale.md", caption="../report/scale.rst", category="Results"),
        csv="results/paper/tables/scale.csv",
    params:
        code=code_digest("pipeline_lib.paper.scale"),
        label=config["label"],
        stem=lambda wildcards, output: output.csv.removesuffix(".csv"),
    log:
        "logs/paper_scale.log",
    benchmark:
        "results/benchmarks/paper_scale.tsv"
    conda:
        "../../envs/report.yaml"
    shell:
        "python -m pipeline_lib.paper.scale table --data {input.csv} --label {params.label}"
        " --stem {params.stem} > {log} 2>&1"


# Beyond the paper: adaptive temperature (softmax_ess) against fixed-tau SoftmaxGRPO and GRPO on train.tasks, paired
# over seeds and test prompts (targets.adaptive_comparison; only when a softmax_ess method is configured).
ADAPTIVE = adaptive_comparison(config)
if ADAPTIVE:

    rule paper_adaptive_tau:
        input:
            done=rl_runs(PLAN, [ADAPTIVE["ours"], *ADAPTIVE["baselines"]]),
            evals=[p.replace("DONE.json", "generations.jsonl").replace("results/train/", "results/eval/")
                   for p in rl_runs(PLAN, [ADAPTIVE["ours"], *ADAPTIVE["baselines"]])],
        output:
            [p for p in ADAPTIVE_OUTPUTS if "/tables/" in p],
        params:
            code=code_digest("pipeline_lib.paper.adaptive"),
            ours=ADAPTIVE["ours"],
            baselines=ADAPTIVE["baselines"],
            label=config["label"],
            rollouts=lambda wildcards, input: [os.path.join(os.path.dirname(d), "rollouts.jsonl") for d in input.done],
        log:
            "logs/paper_adaptive_tau.log",
        benchmark:
            "results/benchmarks/paper_adaptive_tau.tsv"
        conda:
            "../../envs/report.yaml"
        shell:
            "python -m pipeline_lib.paper.adaptive compare --ours {params.ours} --baselines {params.baselines}"
            " --eval {input.evals} --rollouts {params.rollouts} --label {params.label}"
            " --stem results/paper/tables/adaptive_tau > {log} 2>&1"

    rule paper_adaptive_tau_data:
        input:
            done=rl_runs(PLAN, [ADAPTIVE["ours"]]),
        output:
            csv="results/paper/data/adaptive_tau.csv",
        params:
            code=code_digest("pipeline_lib.paper.adaptive"),
            ess_fraction=ADAPTIVE["ess_fraction"],
            rollouts=lambda wildcards, input: [os.path.join(os.path.dirname(d), "rollouts.jsonl") for d in input.done],
        log:
            "logs/paper_adaptive_tau_data.log",
        benchmark:
            "results/benchmarks/paper_adaptive_tau_data.tsv"
        conda:
            "../../envs/report.yaml"
        shell:
            "python -m pipeline_lib.paper.adaptive tau-data --rollouts {params.rollouts}"
            " --ess-fraction {params.ess_fraction} --out {output.csv} > {log} 2>&1"

    rule paper_adaptive_tau_figure:
        input:
            csv=rules.paper_adaptive_tau_data.output.csv,
        output:
            png=report("results/paper/figures/adaptive_tau.png", caption="../report/adaptive_tau.rst",
                       category="Results"),
            pdf="results/paper/figures/adaptive_tau.pdf",
        params:
            code=code_digest("pipeline_lib.paper.adaptive"),
            label=config["label"],
        log:
            "logs/paper_adaptive_tau_figure.log",
        benchmark:
            "results/benchmarks/paper_adaptive_tau_figure.tsv"
        conda:
            "../../envs/report.yaml"
        shell:
            "python -m pipeline_lib.paper.adaptive tau-figure --data {input.csv} --label {params.label}"
            " --png {output.png} --pdf {output.pdf} > {log} 2>&1"
