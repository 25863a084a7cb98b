# The verl preflight (`snakemake --configfile config/preflight.yaml`; pipeline_lib.jobs.engines.verl.preflight): every kind
# of verl job of the paper plan trains 2 real steps on CPU through the real run's code, then a verl checkpoint is
# evaluated. The tiny task's data and the pipeline's tokenizer come from the tiny default's own data rules.
import json

from pipeline_lib.core.cli import json_file
from pipeline_lib.core.config import load_config_file, validate_config
from pipeline_lib.jobs.engines.verl.preflight import KINDS, eval_spec_for, start_of
from pipeline_lib.plan.runs import TOKENIZER

PREFLIGHT = dict(config["preflight"])
PREFLIGHT_JSON = json.dumps(PREFLIGHT)
# the data rules read the tiny default's data settings (config/config.yaml), which the preflight's config leaves out
for _key, _value in load_config_file(PREFLIGHT.get("data_config", "config/config.yaml")).items():
    if _key != "preflight":
        config[_key] = _value
validate_config(config, "workflow/schemas/config.schema.yaml")
PREFLIGHT_TRAIN = [kind for kind in PREFLIGHT["kinds"] if kind in KINDS]
PREFLIGHT_RL = [kind for kind in PREFLIGHT_TRAIN if KINDS[kind][0] == "rl"]
PREFLIGHT_DATA = [f"results/data/{PREFLIGHT['task']}/{split}.parquet" for split in ("sft_train", "rl_train", "rl_test")]


# what `rule preflight` (the Snakefile's default target under this config) asks for
PREFLIGHT_TARGETS = [*expand("results/preflight/{kind}/DONE.json", kind=PREFLIGHT_TRAIN),
                     *(["results/preflight/eval/metrics.json"] if "eval" in PREFLIGHT["kinds"] else [])]


include: "common.smk"
include: "data.smk"


rule preflight_model:
    input:
        TOKENIZER,
        demonstrations=f"results/data/{PREFLIGHT['task']}/sft_train.parquet",
    output:
        "results/preflight/model/config.json",
    params:
        preflight=PREFLIGHT_JSON,
        preflight_file=lambda wildcards: json_file(PREFLIGHT_JSON),  # the same JSON in a file, for the command
        code=code_digest("pipeline_lib.jobs.engines.verl.preflight"),
    log:
        "logs/preflight/model.log",
    benchmark:
        "results/benchmarks/preflight/model.tsv"
    conda:
        "../../envs/train-verl.yaml"
    shell:
        "python -m pipeline_lib.jobs.engines.verl.preflight model --preflight {params.preflight_file}"
        " --tokenizer results/data/tokenizer --demonstrations {input.demonstrations} --out results/preflight/model"
        " > {log} 2>&1"


# Each kind starts where the paper plan's run of its method does (start_of, which reads the paper config's
# train.rl_start): from the tiny model (the pretrained model's stand-in on CPU) or from the supervised kind's final/.

rule preflight_train:
    input:
        PREFLIGHT_DATA,
        init=lambda wildcards: start_of(wildcards.kind, PREFLIGHT)[0],
    output:
        "results/preflight/{kind}/DONE.json",
    params:
        preflight=PREFLIGHT_JSON,
        preflight_file=lambda wildcards: json_file(PREFLIGHT_JSON),  # the same JSON in a file, for the command
        init=lambda wildcards: start_of(wildcards.kind, PREFLIGHT)[1],
        code=code_digest("pipeline_lib.jobs.engines.verl.preflight"),
    wildcard_constraints:
        kind="|".join(PREFLIGHT_TRAIN),
    log:
        "logs/preflight/{kind}.log",
    benchmark:
        "results/benchmarks/preflight/{kind}.tsv"
    # a verl run's Ray actors (trainer, rollout server, agent loop, reward, TransferQueue) start and wait one after
    # another and use about 1.2 of 2 cores on average: two kinds at once on the 2-core default (about 17 GB of RAM
    # together at their peak); a Slurm job still gets the profile's cpus_per_task
    threads: 1
    # Snakemake's attempt: a retry (attempt > 1, e.g. the Slurm profile resubmitting a job cut by its time limit)
    # resumes from the run's last verl checkpoint; a first attempt trains from scratch (a resource, not a param, so a
    # job finished on its second attempt is not rerun for it)
    resources:
        attempt=lambda wildcards, attempt: attempt,
    conda:
        "../../envs/train-verl.yaml"
    shell:
        "python -m pipeline_lib.jobs.engines.verl.preflight run --preflight {params.preflight_file} --kind {wildcards.kind}"
        " --init {params.init} --out results/preflight/{wildcards.kind} --attempt {resources.attempt} > {log} 2>&1"
        " && grep -F '[preflight' {log}"  # each verl step's numbers, in Snakemake's own log


# A verl checkpoint (the GRPO run's merged actor) through the real evaluation entry point and the paper's backend,
# vLLM (its CPU build, with a 1 GiB KV cache instead of a share of the machine's RAM).
rule preflight_eval:
    input:
        done="results/preflight/grpo/DONE.json",
        data=f"results/data/{PREFLIGHT['task']}/rl_test.parquet",
    output:
        "results/preflight/eval/metrics.json",
    params:
        spec=json.dumps(eval_spec_for(PREFLIGHT)),
        spec_file=lambda wildcards: json_file(json.dumps(eval_spec_for(PREFLIGHT))),
    log:
        "logs/preflight/eval.log",
    benchmark:
        "results/benchmarks/preflight/eval.tsv"
    threads: 1  # beside the last training kinds
    conda:
        "../../envs/eval.yaml"
    shell:
        "VLLM_CPU_KVCACHE_SPACE=1 VLLM_CPU_OMP_THREADS_BIND=nobind python -m pipeline_lib.jobs.eval.evaluate --model results/preflight/grpo/final --data {input.data}"
        " --spec {params.spec_file} --seed 0 --out results/preflight/eval > {log} 2>&1 && cat {output}"
