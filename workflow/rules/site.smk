# The site steps (docs/usage.md, "A cluster's first run"): `fetch`, a local rule, downloads every hub model and
# dataset the plan reads (pipeline_lib.plan.hub.hub_repos) into site.hf_home on the submit host, online; every other
# job runs offline (common.smk's shell prefix). `gpu_canary`: one short job, never retried, in the train-verl env, on
# as many GPU nodes as the widest planned job (NCCL across them when that is 2), that checks driver, GPUs, NCCL, vLLM
# from the cache, the cache and the disk (pipeline_lib.jobs.canary), after vLLM started in the eval and judge envs
# (gpu_canary_vllm_*); every job whose rule asks for a GPU waits for it (common.smk's
# after_canary: pipeline_lib.plan.site.asks_gpu reads the rule's resources).
from pipeline_lib.plan.hub import repos_json
from pipeline_lib.plan.site import CANARY, CANARY_VLLM, FETCHED, node_count, node_gpus, site_disk_needs


localrules:
    fetch,


rule fetch:
    input:
        # the commits to download (a relock fetches again); missing, the run is refused before it starts (common.smk)
        lock=[str(HUB_LOCK)] if HUB_LOCK.is_file() else [],
    output:
        FETCHED,
    params:
        lock=str(HUB_LOCK),
        repos=lambda wildcards: json_file(repos_json(HUB_REPOS)),
        hf_home=HF_HOME,
        code=code_digest("pipeline_lib.jobs.fetch"),
    log:
        "logs/fetch.log",
    benchmark:
        "results/benchmarks/fetch.tsv"
    conda:
        "../../envs/cpu-steps.yaml"
    shell:
        "unset HF_HUB_OFFLINE HF_DATASETS_OFFLINE; python -m pipeline_lib.jobs.fetch --repos {params.repos}"
        " --lock {params.lock} --hf-home {params.hf_home} --out {output} > {log} 2>&1"


# vLLM started briefly from the pretrained model in the eval and judge envs (their own vLLM builds), one GPU each; the
# canary's report waits for both, so every GPU job does.
for env in ("eval", "judge"):

    rule:
        name:
            f"gpu_canary_vllm_{env}"
        input:
            fetched=after_fetch,
        output:
            CANARY_VLLM.format(env=env),
        params:
            model=config["train"]["verl"]["model"],
            hf_home=HF_HOME,
            code=code_digest("pipeline_lib.jobs.canary"),
        resources:
            gpu=1,
        retries: 0
        log:
            f"logs/gpu_canary_vllm_{env}.log",
        benchmark:
            f"results/benchmarks/gpu_canary_vllm_{env}.tsv"
        conda:
            f"../../envs/{env}.yaml"
        shell:
            f"python -m pipeline_lib.jobs.canary vllm --env {env} --model {{params.model}} --hf-home {{params.hf_home}}"
            " --out {output} > {log} 2>&1"


rule gpu_canary:
    input:
        fetched=after_fetch,
        vllm=[CANARY_VLLM.format(env=env) for env in ("eval", "judge")],
    output:
        CANARY,
    params:
        repos=lambda wildcards: json_file(repos_json(HUB_REPOS)),
        # what can run at once: the plan's order and the profile's `jobs` (Snakemake's --jobs)
        disk=lambda wildcards: json_file(json.dumps(site_disk_needs(config, PLAN, workflow.resource_settings.nodes))),
        model=config["train"]["verl"]["model"],
        hf_home=HF_HOME,
        code=code_digest("pipeline_lib.jobs.canary"),
    resources:
        nodes=node_count(PLAN),
        gres=f"gpu:{node_gpus(PLAN)}",
    retries: 0  # a failed canary names its fix; resubmitting it to the same nodes would only wait again
    log:
        "logs/gpu_canary.log",
    benchmark:
        "results/benchmarks/gpu_canary.tsv"
    conda:
        "../../envs/train-verl.yaml"
    shell:
        "python -m pipeline_lib.jobs.canary --repos {params.repos} --disk {params.disk} --model {params.model}"
        " --hf-home {params.hf_home} --nodes {resources.nodes} --out {output} > {log} 2>&1"
