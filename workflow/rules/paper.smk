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
        "python -m pipeline_lib.paper.theory compute --spec {params.spec:q} --seed {params.seed}"
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
        group_size=config["theory"]["group_size"],
        table_stem=lambda wildcards, output: output.table_csv.removesuffix(".csv"),
    log:
        "logs/paper_theory.log",
    conda:
        "../../envs/report.yaml"
    shell:
        "python -m pipeline_lib.paper.theory render --group-size {params.group_size}"
        " --curves {input.curves} --weights {input.weights} --weight-view {input.weight_view}"
        " --fig1a-png {output.fig1a_png} --fig1a-pdf {output.fig1a_pdf} --fig1b-png {output.fig1b_png}"
        " --fig1b-pdf {output.fig1b_pdf} --table-stem {params.table_stem} > {log} 2>&1"


rule paper_imagenet_data:
    input:
        done=imagenet_runs(config["imagenet"]),
    output:
        curves="results/paper/data/imagenet_curves.csv",
        summary="results/paper/data/imagenet_summary.csv",
    log:
        "logs/paper_imagenet_data.log",
    conda:
        "../../envs/report.yaml"
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
        label=config["imagenet"]["label"],
        table_stem=lambda wildcards, output: output.table_csv.removesuffix(".csv"),
    log:
        "logs/paper_imagenet.log",
    conda:
        "../../envs/report.yaml"
    shell:
        "python -m pipeline_lib.classify.report render --curves {input.curves} --summary {input.summary}"
        " --label {params.label:q} --png {output.png} --pdf {output.pdf} --table-stem {params.table_stem}"
        " > {log} 2>&1"
