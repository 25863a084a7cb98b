# Stage "train". Language-model training rules are added by the local/verl engine issues.
# Each run owns its directory (checkpoints are not declared outputs); DONE.json is the sentinel.


rule train_imagenet:
    output:
        done="results/train/imagenet/{objective}/m{rollouts}/seed{seed}/DONE.json",
    params:
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
