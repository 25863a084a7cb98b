"""What each GPU run of the plan will cost before it runs: GPU-hours from its tokens, peak memory per GPU, disk, and
the Slurm limits that fit (attempts under the partition's MaxTime, the checkpoint interval a time-out can afford).

Every number is an estimate from the run's shapes (App. B's prompts, M, lengths, steps, micro-batches and GPUs) and
the site's stated facts (``site`` in the config: the effective throughput per GPU, the GPU's memory, MaxTime, the hours
a time-out may lose). Lengths are the caps (``max_prompt_tokens`` + ``max_response_tokens``), so time and memory are
upper bounds for a run whose responses stop early. Only a GPU can confirm them (README, GPU section).

Time: FLOPs = 2 x params per token per forward pass, 4 x per backward pass. A group-RL step of
``prompts x M x (prompt + response)`` tokens runs rollout generation (a forward), verl's old-log-prob pass (a forward),
the reference pass (a forward, when beta > 0) and, per PPO epoch, training (a forward, a recomputed forward under
gradient checkpointing and a backward): 2 + 2 + 2 + 8 x epochs. An SFT step of ``batch x max_length`` tokens: 8.
GPU-hours = FLOPs / (``site.gpu_tflops`` x 1e12) / 3600.

Memory per GPU (FSDP over every GPU of the job): fp32 weights, fp32 gradients and Adam's two fp32 moments, sharded
(16 bytes x params / GPUs); the bf16 reference model, sharded (2 x params / GPUs, when beta > 0); checkpointed
activations (one bf16 hidden state per layer per token) plus one layer's recomputed working set; and the logits of
a micro-batch at the model's vocabulary in fp32 with their log-softmax and its gradient (3 x 4 bytes x tokens x
vocab). verl frees
vLLM's KV cache while it trains (``free_cache_engine``), so the peak is the larger of the training phase and the
rollout phase (vLLM's ``gpu_memory_utilization`` share of the GPU plus the sharded training states, which stay).

Disk: a verl checkpoint holds fp32 weights and Adam's moments (12 bytes x params), two kept until the run finishes
(scratch; pruned then, :mod:`pipeline_lib.jobs.engines.verl.prune`), and each pass-rate probe step's fp32 model shards
(4 bytes x params, scratch); the exported model and each probe step's are bf16 (2 bytes x params, results); a rollout
dump is ~``DUMP_BYTES_PER_TOKEN`` bytes of JSON lines per token of every ``rollout_dump_every``-th step kept after the
run (all steps while it runs).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from pipeline_lib.core.baselines import OPDSettings
from pipeline_lib.core.config import schema_defaults
from pipeline_lib.core.run_spec import PlanError, VerlRLKnobs, VerlSFTKnobs

__all__ = ["ARCHITECTURES", "SFT_TOKENS_PER_GPU", "SITE_TIMED", "VERL_TRAIN", "Architecture", "Estimate",
           "disk_at_once", "disk_needs", "estimate_run", "estimates", "fit_run", "memory_check", "rule_retries",
           "run_stages", "scratch_args", "site_defaults", "site_settings", "token_cap", "token_overrides"]

GB = 1e9


@dataclass(frozen=True)
class Architecture:
    """The shapes of a hub model that its cost depends on (from its config.json)."""

    params: float
    layers: int
    hidden: int
    intermediate: int
    vocab: int


#: The hub models the paper plan trains (config.json of each; params from the model card).
ARCHITECTURES: dict[str, Architecture] = {
    "Qwen/Qwen2.5-1.5B": Architecture(1.54e9, 28, 1536, 8960, 151_936),
    "Qwen/Qwen2.5-3B": Architecture(3.09e9, 36, 2048, 11008, 151_936),
    "Qwen/Qwen3-8B": Architecture(8.19e9, 36, 4096, 12288, 151_936),
}
#: verl 0.9.1's SFT trainer packs micro-batches by tokens by default (sft_trainer_engine.yaml: data.use_dynamic_bsz
#: True, data.max_token_len_per_gpu 8192); a longer demonstration goes alone.
SFT_TOKENS_PER_GPU = 8192
#: Rollout dumps: JSON lines of input, output, score per rollout, ~4 bytes of text per token.
DUMP_BYTES_PER_TOKEN = 4
#: Start-up of an attempt (Ray, model load, vLLM, resume) in hours: time a resubmission spends before its first step.
STARTUP_H = 0.25
#: Bytes per second a job reads or writes its run directory and scratch at (a parallel filesystem's per-client stream;
#: an assumption, not a measurement): prices a run's end (:func:`end_hours`).
DISK_GBPS = 0.5
#: Share of the GPU a token-bounded run may fill (the rest: allocator fragmentation, NCCL buffers, CUDA context).
HEADROOM = 0.9


def site_defaults() -> dict[str, Any]:
    """The site settings' defaults, as the schema's ``site`` block declares them (read, not restated)."""
    return schema_defaults("site")


def site_settings(config: Mapping[str, Any]) -> dict[str, Any]:
    """The config's ``site`` block with the defaults filled (a config that skipped the schema gets them too)."""
    return {**site_defaults(), **(config.get("site") or {})}


@dataclass(frozen=True)
class Estimate:
    """One GPU run's estimates (None where the plan cannot size it: a non-verl GPU job)."""

    key: str
    gpus: int
    gpu_hours: float | None
    wall_hours: float | None
    attempts: int
    checkpoint_every: int | None
    memory_gb: float | None
    tokens_per_gpu: int | None  # verl's ppo/log-prob max_token_len_per_gpu where the run needs dynamic batching
    scratch_gb: float
    results_gb: float
    lengths: str = ""  # where the expected lengths come from (:func:`expected_lengths`)


def _architecture(model: Any, where: str) -> Architecture:
    if model not in ARCHITECTURES:
        raise PlanError(f"{where}: no architecture for model {model!r} to estimate its cost; add it to "
                        f"ARCHITECTURES in pipeline_lib/plan/estimates.py ({sorted(ARCHITECTURES)})")
    return ARCHITECTURES[model]


@dataclass(frozen=True)
class Lengths:
    """The tokens a run's sequences are expected to hold: ``prompt`` and ``response`` (each at most its cap), and
    where each number comes from."""

    prompt: float
    response: float
    source: str


#: Expected response tokens per task where a source states them (the caps are upper bounds a run's responses stop
#: well short of): (tokens, source). Tasks not named here are priced at their cap, said so in :class:`Lengths`.
RESPONSE_TOKENS: dict[str, tuple[float, str]] = {
    "gsm8k": (100.0, "paper, App. tau x M ablation: GSM8K answer lengths stay ~100 tokens at tau <= 0.5"),
    "countdown": (100.0, "paper, App. tau x M ablation: Countdown responses 30-100+ tokens; the upper end"),
}
#: Characters per token of Qwen's tokenizer on English text, to turn a file's characters into tokens where no
#: tokenizer is at hand (:func:`measured_lengths`): OpenAI's and Qwen's BPE rule of thumb, ~4.
CHARS_PER_TOKEN = 4.0


def expected_lengths(spec: Any, measured: Mapping[str, Lengths] | None = None) -> Lengths:
    """A verl run's expected prompt and response tokens: ``measured[task]`` (:func:`measured_lengths`, the
    demonstrations' and prompts' lengths) where given, else :data:`RESPONSE_TOKENS` for the response and the cap for
    the prompt; each bounded by its cap."""
    if spec.rl is not None:
        prompt_cap, response_cap = spec.rl.knobs.max_prompt_tokens, spec.rl.max_response_tokens
    else:
        prompt_cap, response_cap = 0, spec.sft.knobs.max_length
    if measured and spec.task in measured:
        found = measured[spec.task]
        return Lengths(min(found.prompt, prompt_cap), min(found.response, response_cap), found.source)
    if spec.rl is not None and spec.task in RESPONSE_TOKENS:
        tokens, source = RESPONSE_TOKENS[spec.task]
        return Lengths(prompt_cap, min(tokens, response_cap), f"response: {source}; prompt: the cap")
    return Lengths(prompt_cap, response_cap, "the caps (no stated length for this task)")


def attention_flops(arch: Architecture, row_tokens: float) -> float:
    """Attention FLOPs per token of one forward pass over packed rows of ``row_tokens`` tokens: Q K^T and A V over the
    whole row (verl's packed SDPA path computes every pair of the row, :mod:`...verl.translate`), 2 x 2 x hidden per
    pair per layer. A backward pass costs twice its forward, as for the weights."""
    return 4.0 * arch.layers * arch.hidden * row_tokens


def causal_attention_flops(arch: Architecture, sequence_tokens: float) -> float:
    """Attention FLOPs per token of generating a sequence (vLLM's own kernels, causal: each token attends to the
    ones before it, half the row on average)."""
    return 2.0 * arch.layers * arch.hidden * sequence_tokens


@dataclass(frozen=True)
class Cost:
    """A verl run's training FLOPs, split: the student's weights, its attention, and (OPD) the teacher's passes."""

    weights: float
    attention: float
    teacher: float = 0.0

    @property
    def total(self) -> float:
        return self.weights + self.attention + self.teacher


def packed_row(spec: Any, lengths: Lengths, tokens_per_gpu: int | None) -> float:
    """Tokens of one packed training row: a micro-batch's sequences at their expected length (verl removes the
    padding and packs them), or verl's token bound per GPU where the run has one; SFT packs to
    :data:`SFT_TOKENS_PER_GPU` (or one longer demonstration)."""
    if spec.rl is not None:
        row = spec.rl.knobs.micro_batch_per_gpu * (lengths.prompt + lengths.response)
        return float(min(row, tokens_per_gpu)) if tokens_per_gpu else float(row)
    return float(max(SFT_TOKENS_PER_GPU, spec.sft.knobs.max_length))


def run_cost(spec: Any, arch: Architecture, lengths: Lengths, tokens_per_gpu: int | None = None,
             teacher: Architecture | None = None) -> Cost:
    """Training FLOPs of a verl run at its expected lengths (the module docstring's passes), with attention at the
    packed row length (:func:`packed_row`) and, for OPD, the teacher's forward pass over every rollout token."""
    row = packed_row(spec, lengths, tokens_per_gpu)
    if spec.rl is not None:
        rl = spec.rl
        sequence = lengths.prompt + lengths.response
        tokens = rl.prompts_per_step * rl.group_size * sequence * rl.steps
        passes = 2 + 2 + (2 if rl.beta > 0 else 0) + 8 * rl.ppo_epochs
        packed_forwards = 1 + (1 if rl.beta > 0 else 0) + 4 * rl.ppo_epochs  # old log-prob, reference, update
        attention = tokens * (causal_attention_flops(arch, sequence) + packed_forwards * attention_flops(arch, row))
        extra = 0.0
        if teacher is not None:  # one forward of the teacher over each rollout's prompt and response
            extra = tokens * (2 * teacher.params + causal_attention_flops(teacher, sequence))
        return Cost(passes * arch.params * tokens, attention, extra)
    sft = spec.sft
    tokens = sft.batch_size * (lengths.prompt + lengths.response) * sft.steps
    return Cost(8 * arch.params * tokens, 4 * tokens * attention_flops(arch, row))


def _memory_gb(arch: Architecture, gpus: int, tokens: int, reference: bool, vllm_share: float,
               gpu_memory_gb: float) -> float:
    """Peak GB per GPU: training phase (states, reference, activations, logits) vs rollout phase (module docstring)."""
    states = 16 * arch.params / gpus + (2 * arch.params / gpus if reference else 0.0)
    activations = tokens * arch.layers * arch.hidden * 2 + tokens * (10 * arch.hidden + 3 * arch.intermediate) * 2
    logits = 3 * 4 * tokens * arch.vocab
    training = (states + activations + logits) / GB
    rollout = vllm_share * gpu_memory_gb + 16 * arch.params / gpus / GB
    return max(training, rollout)


def _micro_tokens(spec: Any) -> tuple[int, int]:
    """(tokens of App. B's micro-batch per GPU, the longest sequence) of a verl run."""
    if spec.rl is not None:
        rl = spec.rl
        longest = rl.knobs.max_prompt_tokens + rl.max_response_tokens
        return max(rl.knobs.mini_batch_per_device, rl.knobs.micro_batch_per_gpu) * longest, longest
    return max(SFT_TOKENS_PER_GPU, spec.sft.knobs.max_length), spec.sft.knobs.max_length


def token_cap(arch: Architecture, gpus: int, reference: bool, vllm_share: float, gpu_memory_gb: float,
              longest: int) -> int | None:
    """The largest multiple of 1,024 tokens per GPU whose estimate fits ``HEADROOM`` of the GPU, at least one
    sequence (verl needs ``max_token_len_per_gpu`` >= the longest sequence); None when not even one fits."""
    budget = HEADROOM * gpu_memory_gb
    low, high = 1, 1 << 10
    while _memory_gb(arch, gpus, high * 1024, reference, vllm_share, gpu_memory_gb) <= budget:
        high *= 2
    while low < high:
        mid = (low + high + 1) // 2
        if _memory_gb(arch, gpus, mid * 1024, reference, vllm_share, gpu_memory_gb) <= budget:
            low = mid
        else:
            high = mid - 1
    cap = low * 1024
    if _memory_gb(arch, gpus, cap, reference, vllm_share, gpu_memory_gb) > budget or cap < longest:
        return None
    return cap


def opd_teacher(spec: Any) -> tuple[Architecture, int] | None:
    """(the OPD teacher's architecture, its GPUs per node) of an OPD run (None for any other run): the teacher takes
    ``train.baselines.opd.verl.gpus_per_node`` of each node's GPUs, the student the rest."""
    if not isinstance(spec.baseline, OPDSettings) or spec.rl is None:
        return None
    return _architecture(spec.baseline.teacher.hub, f"{spec.task}/{spec.method} teacher"), \
        int(spec.baseline.verl.gpus_per_node)


def end_hours(spec: Any, arch: Architecture, lengths: Lengths, dump_every: int, disk_gbps: float = DISK_GBPS) -> float:
    """Hours of a run's end after its last step (:func:`pipeline_lib.core.run_end.finish_run`): the merger reads the
    fp32 actor and writes ``final/`` in bf16 (4 + 2 bytes per parameter), the journal hashes ``final/`` twice (record,
    verify: 2 x 2), the collection reads every rollout dump and the kept ones are copied back; at ``disk_gbps``."""
    read_write = (4 + 2 + 2 * 2) * arch.params
    if spec.rl is not None:
        rl = spec.rl
        dump = rl.prompts_per_step * rl.group_size * (lengths.prompt + lengths.response) * DUMP_BYTES_PER_TOKEN
        read_write += dump * rl.steps + dump * math.ceil(rl.steps / dump_every)
    return read_write / (disk_gbps * GB) / 3600


def estimate_run(run: Any, site: Mapping[str, Any], measured: Mapping[str, Lengths] | None = None,
                 step_hours: float | None = None) -> Estimate | None:
    """The estimates of one planned run (None: not a GPU job); ``measured``: lengths read from the task's data
    (:func:`expected_lengths`); ``step_hours``: a step's measured hours (``calibrate``), replacing the FLOPs'."""
    gpus = _gpus(run.resources)
    if gpus == 0:
        return None
    limit_h = site["max_runtime_min"] / 60
    spec = run.spec
    if run.verl_kind is None or not isinstance(getattr(spec.rl or spec.sft, "knobs", None),
                                               (VerlRLKnobs, VerlSFTKnobs)):
        return Estimate(run.key, gpus, None, None, 1, None, None, None, 0.0, 0.0)
    arch = _architecture(spec.model, run.key)
    lengths = expected_lengths(spec, measured)
    reference = spec.rl is not None and spec.rl.beta > 0
    share = spec.rl.knobs.gpu_memory_utilization if spec.rl is not None else 0.0
    tokens, longest = _micro_tokens(spec)
    memory = _memory_gb(arch, gpus, tokens, reference, share, site["gpu_memory_gb"])
    cap = None
    if spec.rl is not None and memory > HEADROOM * site["gpu_memory_gb"]:
        cap = token_cap(arch, gpus, reference, share, site["gpu_memory_gb"], longest)
        if cap is not None:
            memory = _memory_gb(arch, gpus, cap, reference, share, site["gpu_memory_gb"])
    teacher = opd_teacher(spec)
    cost = run_cost(spec, arch, lengths, cap, teacher[0] if teacher else None)
    throughput = site["gpu_tflops"] * 1e12 * 3600  # FLOPs per GPU-hour
    if teacher is not None:  # the teacher scores each batch on its GPUs, the student waits, then trains on the rest
        teacher_gpus = teacher[1] * gpus // spec.rl.knobs.gpus_per_node
        wall_h = (cost.weights + cost.attention) / ((gpus - teacher_gpus) * throughput) \
            + cost.teacher / (teacher_gpus * throughput)
    else:
        wall_h = cost.total / (gpus * throughput)
    steps = spec.rl.steps if spec.rl is not None else spec.sft.steps
    if step_hours is not None:
        wall_h = step_hours * steps
    gpu_h = wall_h * gpus  # the job holds every GPU of its allocation for its wall time
    step_h = wall_h / steps
    usable_h = limit_h - STARTUP_H - site["max_lost_hours"]
    if usable_h <= 0:
        raise PlanError(f"site.max_runtime_min {site['max_runtime_min']} leaves no time after the start-up "
                        f"({STARTUP_H} h) and site.max_lost_hours ({site['max_lost_hours']} h)")
    attempts = max(1, math.ceil((wall_h + end_hours(spec, arch, lengths, site["rollout_dump_every"])) / usable_h))
    # A time-out loses the steps since the last save: save every this many, as seldom as the stated hour allows.
    every = max(1, min(steps, math.floor(site["max_lost_hours"] / step_h))) if step_h > 0 else steps
    scratch = 2 * 12 * arch.params / GB
    results = 2 * arch.params / GB
    if spec.rl is not None:
        rl = spec.rl
        if rl.probe_every is not None:
            # verl saves every gcd(checkpoint_every, probe_every) steps (it must save each probe step): a divisor of
            # probe_every keeps that gcd the interval planned here, not a far smaller one (every step, for coprimes)
            every = max(d for d in range(1, min(every, rl.probe_every) + 1) if rl.probe_every % d == 0)
            probes = len(rl.probe_steps())
            scratch += probes * 4 * arch.params / GB  # each probe step's fp32 model shards, kept until the run ends
            results += probes * 2 * arch.params / GB  # exported, bf16: probe/step_<s>/
        dump = rl.prompts_per_step * rl.group_size * (lengths.prompt + lengths.response) * DUMP_BYTES_PER_TOKEN / GB
        scratch += dump * rl.steps
        results += dump * math.ceil(rl.steps / site["rollout_dump_every"])
    return Estimate(run.key, gpus, gpu_h, wall_h, attempts, every, memory, cap, scratch, results, lengths.source)


def _gpus(resources: Mapping[str, Any]) -> int:
    if "gres" in resources:
        return int(resources.get("nodes", 1)) * int(str(resources["gres"]).rsplit(":", 1)[-1])
    return int(resources.get("gpu", 0))


def estimates(config: Mapping[str, Any], plan: Any) -> dict[tuple[str, str], Estimate]:
    """(rule, run key) -> :class:`Estimate` of every GPU run of ``plan``."""
    site = site_settings(config)
    out = {}
    for run in plan.runs:
        estimate = estimate_run(run, site)
        if estimate is not None:
            out[run.job, run.key] = estimate
    return out


def memory_check(config: Mapping[str, Any], plan: Any) -> None:
    """Refuse a plan with a GPU job whose estimated peak exceeds ``site.gpu_memory_gb`` (after the token bound)."""
    limit = site_settings(config)["gpu_memory_gb"]
    over = [e for e in estimates(config, plan).values() if e.memory_gb is not None and e.memory_gb > limit]
    if over:
        raise PlanError("estimated peak GPU memory over site.gpu_memory_gb "
                        f"({limit:g} GB; pipeline_lib/plan/estimates.py): "
                        + "; ".join(f"{e.key} {e.memory_gb:.1f} GB" for e in over))


def disk_needs(config: Mapping[str, Any], plan: Any) -> dict[str, float]:
    """GB the whole plan writes under the results root (``results``: exported models, kept rollout dumps, which stay)
    and the scratch root (``scratch``: every verl run's two kept checkpoints and its dumps, as if all ran at once: an
    upper bound no site needs; :func:`disk_at_once` is what can run at once)."""
    found = estimates(config, plan).values()
    return {"results": sum(e.results_gb for e in found), "scratch": sum(e.scratch_gb for e in found)}


def run_stages(plan: Any) -> dict[tuple[str, str], int]:
    """(rule, run key) -> the run's place in the plan's order: 0 for a run that reads no other run's output, else one
    more than the latest run it reads (an RL run from an SFT run's ``final/``)."""
    runs = {(run.job, run.key): run for run in plan.runs}
    owners = {f"results/train/{run.key}/": ident for ident, run in runs.items()}
    reads = {ident: {owners[prefix] for path in run.inputs.values() for prefix in owners
                     if str(path).startswith(prefix) and owners[prefix] != ident}
             for ident, run in runs.items()}
    stage: dict[tuple[str, str], int] = {}

    def depth(ident: tuple[str, str], seen: tuple[tuple[str, str], ...] = ()) -> int:
        if ident not in stage:
            if ident in seen:
                raise PlanError(f"runs read each other's outputs in a cycle: {[key for _, key in seen]}")
            stage[ident] = max((depth(other, (*seen, ident)) + 1 for other in reads[ident]), default=0)
        return stage[ident]

    for ident in runs:
        depth(ident)
    return stage


def disk_at_once(config: Mapping[str, Any], plan: Any, jobs: int | None) -> dict[str, dict[str, float]]:
    """What each root must hold, from what can run at once (the canary's disk check, :mod:`pipeline_lib.jobs.canary`).

    ``scratch`` (a run's checkpoints and dumps, freed when it ends): ``one``, the largest single run's; ``at_once``,
    the most that runs of one stage of the plan's order (:func:`run_stages`) hold together when at most ``jobs`` run
    at once (the profile's ``jobs``; None: no limit), the largest first. ``results`` (kept for good): ``one``, the
    largest run's; ``at_once``, the plan's total. ``jobs``: the number of runs ``at_once`` assumes."""
    found = estimates(config, plan)
    stages = run_stages(plan)
    by_stage: dict[int, list[float]] = {}
    for ident, estimate in found.items():
        by_stage.setdefault(stages[ident], []).append(estimate.scratch_gb)
    limit = jobs if jobs and jobs > 0 else None
    waves = {stage: sorted(sizes, reverse=True)[:limit] for stage, sizes in by_stage.items()}
    peak = max(waves.values(), key=sum, default=[])
    return {"scratch": {"one": max((e.scratch_gb for e in found.values()), default=0.0), "at_once": sum(peak),
                        "jobs": float(len(peak))},
            "results": {"one": max((e.results_gb for e in found.values()), default=0.0),
                        "at_once": sum(e.results_gb for e in found.values()), "jobs": float(len(found))}}


def token_overrides(cap: int) -> tuple[str, ...]:
    """verl 0.9.1's keys that bound a micro-batch by tokens per GPU (actor update, old-log-prob and reference passes;
    ``ppo_trainer.yaml``), where App. B's micro-batch would not fit."""
    return ("actor_rollout_ref.actor.use_dynamic_bsz=true",
            f"actor_rollout_ref.actor.ppo_max_token_len_per_gpu={cap}",
            "actor_rollout_ref.rollout.log_prob_use_dynamic_bsz=true",
            f"actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu={cap}",
            "actor_rollout_ref.ref.log_prob_use_dynamic_bsz=true",
            f"actor_rollout_ref.ref.log_prob_max_token_len_per_gpu={cap}")


def fit_run(run: Any, site: Mapping[str, Any]) -> Any:
    """``run`` with the limits that fit the site: its checkpoint interval from :func:`estimate_run` and, where App.
    B's micro-batch would not fit the GPU, verl's token bound (before the config's own extra overrides). A run the
    plan cannot size comes back unchanged."""
    estimate = estimate_run(run, site)
    if estimate is None or estimate.checkpoint_every is None:
        return run
    spec = run.spec
    if spec.rl is not None:
        spec = replace(spec, rl=replace(spec.rl, checkpoint_every=estimate.checkpoint_every))
        if estimate.tokens_per_gpu is not None:
            spec = replace(spec, extra_overrides=(*token_overrides(estimate.tokens_per_gpu), *spec.extra_overrides))
    else:
        spec = replace(spec, sft=replace(spec.sft, checkpoint_every=estimate.checkpoint_every))
    old, new = run.spec.to_json(), spec.to_json()
    return replace(run, spec=spec, args=tuple(new if arg == old else arg for arg in run.args))


#: The entry points of verl's RL and SFT jobs: they take the site's scratch and rollout-dump settings.
VERL_TRAIN = ("pipeline_lib.jobs.engines.verl.train", "pipeline_lib.jobs.engines.verl.sft")


def scratch_args(run: Any, site: Mapping[str, Any]) -> Any:
    """``run`` with the site's disk settings on its command where it is a verl training job: ``--scratch-dir
    <site.scratch_root>/<task>/<name>/seed<k>`` (its checkpoints and rollout dumps, :mod:`.prune`) and ``--dump-every
    <site.rollout_dump_every>``. Arguments of the job, not of its spec: verl's overrides stay the same wherever the
    scratch is."""
    if run.job != "train_verl" or run.entry_module not in VERL_TRAIN:
        return run
    return replace(run, args=(*run.args, "--scratch-dir", f"{site['scratch_root'].rstrip('/')}/{run.key}",
                              "--dump-every", str(site["rollout_dump_every"])))


#: The rules whose jobs ask Slurm for the partition's MaxTime (site.max_runtime_min) and resubmit to resume.
SITE_TIMED = ("train_verl", "train_trl", "train_imagenet")


def rule_retries(config: Mapping[str, Any], plan: Any) -> dict[str, int]:
    """Per rule of :data:`SITE_TIMED` with sized runs: the resubmissions its longest run needs (Snakemake's rule
    ``retries`` directive: one count per rule, not per job; each attempt asks the same MaxTime and resumes)."""
    out: dict[str, int] = {}
    for (job, _), estimate in estimates(config, plan).items():
        if job in SITE_TIMED and estimate.gpu_hours is not None:
            out[job] = max(out.get(job, 0), estimate.attempts - 1)
    return out
