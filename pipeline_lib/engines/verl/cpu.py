"""verl 0.9.1 on CPU, for the preflight only: a ``verl.plugins`` entry point that does nothing unless asked.

``import verl`` loads every ``verl.plugins`` entry point in every process (driver, Ray workers, torchrun ranks).
This module is one of them, and it changes verl only when ``PIPELINE_VERL_CPU=1`` is set (the preflight sets it,
and passes it to Ray's workers); without it, importing it does nothing, so a GPU run never loads the CPU support.

What stock verl needs on CPU, each point found by running it (verl file:line in site-packages):

- a CPU platform for verl's platform manager (``plugin/platform/platform_manager.py:114`` falls back to CUDA),
  selected through ``VERL_PLATFORM=cpu``; its Ray resource stays ``GPU`` (the preflight declares one "GPU" per
  trainer process to Ray, ``+ray_kwargs.ray_init.num_gpus``), so verl's placement code runs unchanged;
- gloo process groups: ``utils/distributed.py:63,89`` build ``cpu:gloo,<device>:<backend>``, which torch refuses when
  the device is ``cpu`` too;
- the FSDP engine registered for ``cpu`` (``workers/engine/fsdp/transformer_impl.py:1143`` registers cuda/npu
  only), with FSDP2 (FSDP1's ``sync_module_states`` needs a GPU) and no torch.compile: the latter two are Hydra
  overrides (:data:`CPU_OVERRIDES`);
- the reference's ``CPUOffloadPolicy(pin_memory=True)`` (``transformer_impl.py:462``) without pinned memory (pinning
  needs an accelerator);
- ``torch.cpu`` as the device module: verl's FLOPs counter (``utils/flops_counter.py:77``) recognises the CPU by it;
- a rollout that samples with transformers (only vLLM/SGLang/TRT-LLM are registered, ``workers/rollout/base.py:89``
  and ``workers/rollout/replica.py:388``): :class:`HFRolloutReplica` (registered as ``hf_cpu``) runs one Ray actor
  holding a transformers copy of the policy, and :class:`HFRolloutAdapter`, the trainer side, sends it the actor's
  weights after every update (verl's ``naive`` weight sync), so a rollout after an update samples from the updated
  weights.

The TransferQueue / Ray sizes that fit two cores (``trainer/main_ppo.py:149``
waits forever otherwise) are Hydra overrides too (:func:`cpu_overrides`); the attention (sdpa) is the GPU run's own
(``translate.ATTENTION``).
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from pipeline_lib.env import env, env_number

__all__ = ["ENV", "ROLLOUT_NAME", "cpu_enabled", "cpu_overrides", "install"]

#: The switch: "1" turns the CPU support on, unset or "0" leaves verl as it is; anything else is an error.
ENV = "PIPELINE_VERL_CPU"
#: The rollout replica's registered name (``actor_rollout_ref.rollout.name``).
ROLLOUT_NAME = "hf_cpu"

log = logging.getLogger("pipeline_lib.engines.verl.cpu")
_installed = False


def cpu_enabled() -> bool:
    """Whether ``PIPELINE_VERL_CPU`` asks for the CPU support (``1``); ``0`` or unset: no. Other values fail,
    naming the variable (:mod:`pipeline_lib.env`)."""
    return env(ENV) == "1"


def _rank(name: str) -> int:
    """A torch.distributed rank variable (RANK, LOCAL_RANK: 0 when unset) or WORLD_SIZE (1 when unset)."""
    return int(env_number(name, 1 if name == "WORLD_SIZE" else 0, integer=True, minimum=-1))


def cpu_overrides(kind: str, gpus: int = 1) -> list[str]:
    """The Hydra overrides that put one verl run (``kind``: ``sft`` or ``rl``) on CPU; the only ones the preflight
    adds to a real run's. ``gpus`` is the trainer's process count (the preflight's ``gpus_per_node``)."""
    env = {ENV: "1", "VERL_PLATFORM": "cpu"}
    if kind == "sft":
        return ["engine.strategy=fsdp2", "engine.use_torch_compile=false", "trainer.device=cpu"]
    pairs = [
        f"actor_rollout_ref.rollout.name={ROLLOUT_NAME}",
        "actor_rollout_ref.rollout.mode=async",
        "actor_rollout_ref.rollout.agent.num_workers=1",
        "actor_rollout_ref.rollout.calculate_log_probs=true",
        "actor_rollout_ref.rollout.checkpoint_engine.backend=naive",
        "actor_rollout_ref.model.use_remove_padding=false",
        "reward.num_workers=1",
        "transfer_queue.backend.SimpleStorage.num_data_storage_units=1",
        # Ray's logical CPUs: the trainer's placement bundle takes 3 per process beside the TaskRunner, the agent loop,
        # reward and TransferQueue actors (each 1); with the machine's 2 the bundle never places.
        "ray_kwargs.ray_init.num_cpus=8",
        "data.dataloader_num_workers=0",
        f"+ray_kwargs.ray_init.num_gpus={gpus}",
        "trainer.device=cpu",
    ]
    for role in ("actor", "ref"):
        pairs += [f"actor_rollout_ref.{role}.strategy=fsdp2",
                  f"actor_rollout_ref.{role}.fsdp_config.use_torch_compile=false"]
    pairs += [f"+ray_kwargs.ray_init.runtime_env.env_vars.{name}='{value}'" for name, value in env.items()]
    return pairs


# --- the platform ------------------------------------------------------------------------------------------------

def _platform_class() -> type:
    import torch
    from verl.plugin.platform.platform_base import PlatformBase

    class PlatformCPU(PlatformBase):
        """verl's platform interface on the CPU: gloo, ``torch.cpu``, no memory or profiler to manage."""

        device_name = "cpu"
        vendor_name = "cpu"
        device_module = torch.cpu

        def is_available(self) -> bool:
            return True

        def is_platform_available(self, use_smi_check: bool = False) -> bool:
            return True

        def current_device(self) -> str:  # verl passes it to .to()/device=: the CPU, not accelerator 0
            return "cpu"

        def device_count(self) -> int:
            return 1

        def set_device(self, device_index: int) -> None:
            return None

        def synchronize(self, device_index: int | None = None) -> None:
            return None

        def manual_seed(self, seed: int) -> None:
            torch.manual_seed(seed)

        def manual_seed_all(self, seed: int) -> None:
            torch.manual_seed(seed)

        def set_allocator_settings(self, settings: str) -> None:
            return None

        def empty_cache(self) -> None:
            return None

        def get_device_capability(self, device_index: int = 0) -> tuple[int | None, int | None]:
            return None, None

        def communication_backend_name(self) -> str:
            return "gloo"

        def visible_devices_envvar(self) -> str:
            return "CUDA_VISIBLE_DEVICES"

        @contextmanager
        def nvtx_range(self, msg: str) -> Iterator[None]:
            yield

        def profiler_start(self) -> None:
            return None

        def profiler_stop(self) -> None:
            return None

        def ray_resource_name(self) -> str:
            return "GPU"

        def ray_noset_envvars(self) -> list[str]:
            return []

        def is_ipc_supported(self) -> bool:
            return False

        def cudart(self) -> Any:
            return None

    return PlatformCPU


def _complete_torch_cpu() -> None:
    """``torch.cpu`` as verl's device module (its FLOPs counter tests ``device is torch.cpu``) with the calls verl
    makes on a device module that ``torch.cpu`` lacks: memory statistics (0: nothing to report), seeding and RNG
    state (the CPU generator's). Only missing names are added."""
    import torch

    def zero(*args: Any, **kwargs: Any) -> int:
        return 0

    def nothing(*args: Any, **kwargs: Any) -> None:
        return None

    def mem_get_info(*args: Any, **kwargs: Any) -> tuple[int, int]:
        page = os.sysconf("SC_PAGE_SIZE")
        return os.sysconf("SC_AVPHYS_PAGES") * page, os.sysconf("SC_PHYS_PAGES") * page

    extra = {"memory_allocated": zero, "memory_reserved": zero, "max_memory_allocated": zero,
             "max_memory_reserved": zero, "mem_get_info": mem_get_info, "reset_peak_memory_stats": nothing,
             "empty_cache": nothing, "ipc_collect": nothing, "manual_seed": torch.manual_seed,
             "manual_seed_all": torch.manual_seed, "get_rng_state": torch.get_rng_state,
             "set_rng_state": torch.set_rng_state, "is_bf16_supported": lambda *a, **k: True}
    for name, function in extra.items():
        if not hasattr(torch.cpu, name):
            setattr(torch.cpu, name, function)


def _install_platform() -> None:
    from verl.plugin.platform.platform_manager import PlatformRegistry

    _complete_torch_cpu()

    if "cpu" not in PlatformRegistry.registered_names():
        PlatformRegistry.register(platform="cpu")(_platform_class())
    os.environ.update(VERL_PLATFORM="cpu")


# --- gloo process groups -----------------------------------------------------------------------------------------

def _install_gloo() -> None:
    """verl's two process-group helpers with a gloo-only backend (their ``cpu:gloo,cpu:gloo`` is refused)."""
    from datetime import timedelta

    import torch.distributed
    from verl.utils import distributed

    def initialize_global_process_group(timeout_second: int = 36000) -> tuple[int, int, int]:
        torch.distributed.init_process_group(backend="gloo", timeout=timedelta(seconds=timeout_second),
                                             init_method=env("DIST_INIT_METHOD"))
        return _rank("LOCAL_RANK"), _rank("RANK"), _rank("WORLD_SIZE")

    def initialize_global_process_group_ray(timeout_second: int | None = None, backend: str | None = None) -> None:
        if torch.distributed.is_initialized():
            return
        torch.distributed.init_process_group(
            backend="gloo", rank=_rank("RANK"), world_size=_rank("WORLD_SIZE"),
            timeout=timedelta(seconds=timeout_second) if timeout_second is not None else None,
            init_method=env("DIST_INIT_METHOD"))

    distributed.initialize_global_process_group = initialize_global_process_group
    distributed.initialize_global_process_group_ray = initialize_global_process_group_ray


# --- the FSDP engine on cpu, reference offload unpinned ----------------------------------------------------------

def _install_engine() -> None:
    """``EngineRegistry`` answers ``cpu`` with the engine registered for ``cuda`` (the same FSDP class), and the FSDP
    module's ``CPUOffloadPolicy`` never pins memory."""
    from verl.workers.engine import base

    registry = base.EngineRegistry
    original = registry.get_engine_cls.__func__

    def get_engine_cls(cls: type, model_type: str, backend: str) -> type:
        engines = cls._engines.get(model_type, {}).get(backend, {})
        if "cpu" not in engines and "cuda" in engines:
            engines["cpu"] = engines["cuda"]
        _unpin_offload()
        return original(cls, model_type, backend)

    registry.get_engine_cls = classmethod(get_engine_cls)


def _unpin_offload() -> None:
    import sys

    module = sys.modules.get("verl.workers.engine.fsdp.transformer_impl")
    if module is None or getattr(module.CPUOffloadPolicy, "_unpinned", False):
        return
    policy = module.CPUOffloadPolicy

    def unpinned(pin_memory: bool = True) -> Any:
        return policy(pin_memory=False)

    unpinned._unpinned = True
    module.CPUOffloadPolicy = unpinned


# --- the transformers rollout ------------------------------------------------------------------------------------

def _server_name(replica_rank: int) -> str:
    return f"{ROLLOUT_NAME}_server_{replica_rank}"


class HFRolloutServer:
    """One rollout replica: a transformers copy of the policy that samples token-in/token-out (verl's server API).

    Sampling follows vLLM's: softmax of logits / temperature, restricted to top-k / top-p; temperature 0 is greedy;
    the returned log-probs are of the sampled tokens under that temperature (what verl compares with the actor's).
    """

    def __init__(self, config: Any, model_config: Any, seed: int) -> None:
        import torch
        from transformers import AutoConfig, AutoModelForCausalLM

        self.config = config
        from transformers import AutoTokenizer

        # verl hands the model section as its dataclass (local_path) or as the raw config (path)
        path = getattr(model_config, "local_path", None) or model_config.path
        hf_config = AutoConfig.from_pretrained(path)
        self.model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, attn_implementation="sdpa").eval()
        eos = hf_config.eos_token_id if hf_config.eos_token_id is not None else []
        self.eos = set(eos if isinstance(eos, list) else [eos])
        tokenizer_eos = AutoTokenizer.from_pretrained(path).eos_token_id
        if tokenizer_eos is not None:
            self.eos.add(int(tokenizer_eos))
        self.generator = torch.Generator().manual_seed(int(seed))
        self.weight_version = 0
        self.lock = asyncio.Lock()

    def load_weights(self, state: dict[str, Any], global_steps: int | None = None) -> int:
        """The actor's weights (HF names) into this copy; every parameter must be covered (tied ones excepted)."""
        import torch

        own = self.model.state_dict()
        unknown = sorted(set(state) - set(own))
        if unknown:
            raise KeyError(f"rollout weights: the actor sent parameters the rollout model lacks: {unknown[:5]}")
        with torch.no_grad():
            for name, tensor in state.items():
                own[name].copy_(tensor.to(own[name].dtype))
        self.weight_version = int(global_steps) if global_steps is not None else self.weight_version + 1
        return self.weight_version

    def _max_tokens(self, prompt_len: int, sampling_params: dict[str, Any]) -> int:
        limit = self.config.response_length
        for key in ("max_tokens", "max_new_tokens"):
            if key in sampling_params:
                limit = int(sampling_params[key])
        room = self.config.prompt_length + self.config.response_length - prompt_len
        return max(1, min(limit, self.config.response_length, room))

    def _sample(self, prompt_ids: list[int], params: dict[str, Any]) -> tuple[list[int], list[float], str]:
        import torch

        temperature = float(params.get("temperature", 1.0))
        top_k, top_p = int(params.get("top_k", -1) or -1), float(params.get("top_p", 1.0))
        tokens: list[int] = []
        log_probs: list[float] = []
        past = None
        inputs = torch.tensor([prompt_ids], dtype=torch.long)
        with torch.no_grad():
            for _ in range(self._max_tokens(len(prompt_ids), params)):
                out = self.model(input_ids=inputs, past_key_values=past, use_cache=True)
                past = out.past_key_values
                logits = out.logits[0, -1].float()
                if temperature <= 0:
                    token = int(torch.argmax(logits))
                    logp = float(torch.log_softmax(logits, -1)[token])
                else:
                    scaled = torch.log_softmax(logits / temperature, -1)
                    filtered = scaled.clone()
                    if 0 < top_k < filtered.numel():
                        kth = torch.topk(filtered, top_k).values[-1]
                        filtered[filtered < kth] = -float("inf")
                    if top_p < 1.0:
                        order = torch.argsort(filtered, descending=True)
                        cumulative = torch.cumsum(torch.softmax(filtered[order], -1), -1)
                        drop = order[(cumulative - torch.softmax(filtered[order], -1)) >= top_p]
                        filtered[drop] = -float("inf")
                    token = int(torch.multinomial(torch.softmax(filtered, -1), 1, generator=self.generator))
                    logp = float(scaled[token])
                tokens.append(token)
                log_probs.append(logp)
                if token in self.eos:
                    return tokens, log_probs, "completed"
                inputs = torch.tensor([[token]], dtype=torch.long)
        return tokens, log_probs, "completed"

    def _prompt_logprobs(self, ids: list[int], top: int) -> tuple[list[list[int]], list[list[float]]]:
        """vLLM's ``prompt_logprobs`` as verl reads them (``extract_prompt_logprobs``): per position the next token's
        log-prob (``top`` = 0) or the ``top`` most likely next tokens, then one dummy row for the last position."""
        import torch

        with torch.no_grad():
            logps = torch.log_softmax(self.model(input_ids=torch.tensor([ids])).logits[0, :-1].float(), -1)
        if top == 0:
            following = torch.tensor(ids[1:])
            token_ids = following[:, None]
            values = logps.gather(1, token_ids)
        else:
            values, token_ids = torch.topk(logps, top, dim=-1)
        width = max(top, 1)
        return [*token_ids.tolist(), [0] * width], [*values.tolist(), [0.0] * width]

    async def generate(self, prompt_ids: list[int], sampling_params: dict[str, Any], request_id: str,
                       **unused: Any) -> Any:
        from verl.utils import normalize_token_ids
        from verl.workers.rollout.replica import TokenOutput

        if sampling_params.get("prompt_logprobs") is not None:  # a teacher's forward pass over a sequence (OPD)
            ids = normalize_token_ids(prompt_ids)
            async with self.lock:
                token_ids, values = await asyncio.to_thread(self._prompt_logprobs, ids,
                                                            int(sampling_params["prompt_logprobs"]))
            return TokenOutput(token_ids=[], stop_reason="completed",
                               extra_fields={"prompt_ids": token_ids, "prompt_logprobs": values,
                                             "global_steps": self.weight_version})
        async with self.lock:  # one sequence at a time: the model is not re-entrant, and 2 cores gain nothing
            tokens, log_probs, stop = await asyncio.to_thread(self._sample, normalize_token_ids(prompt_ids),
                                                              dict(sampling_params))
        return TokenOutput(token_ids=tokens, log_probs=log_probs if sampling_params.get("logprobs") else None,
                           stop_reason=stop, extra_fields={"global_steps": self.weight_version})

    # verl's server control API: nothing to free or pause on CPU
    async def wake_up(self) -> None: ...
    async def sleep(self) -> None: ...
    async def clear_kv_cache(self) -> None: ...
    async def release_kv_cache(self) -> None: ...
    async def resume_kv_cache(self) -> None: ...
    async def abort_all_requests(self, reject_request: bool = False) -> None: ...
    async def resume_generation(self) -> None: ...
    async def start_profile(self, **kwargs: Any) -> None: ...
    async def stop_profile(self) -> None: ...


def _replica_class() -> type:
    import ray
    from verl.workers.rollout.replica import RolloutReplica

    class HFRolloutReplica(RolloutReplica):
        """A rollout replica served by :class:`HFRolloutServer` (one Ray actor per replica, 0 GPUs)."""

        async def launch_servers(self) -> None:
            kind = "reward" if self.is_reward_model else "teacher" if self.is_teacher_model else "policy"
            name = _server_name(self.replica_rank) if kind == "policy" else \
                f"{ROLLOUT_NAME}_{kind}_{self.replica_rank}{self.name_suffix}"
            server = ray.remote(HFRolloutServer).options(name=name, num_cpus=0, max_concurrency=self.max_concurrency)
            handle = server.remote(self.config, self.model_config, seed=self.config.get("seed", 0)
                                   if hasattr(self.config, "get") else getattr(self.config, "seed", 0))
            await handle.wake_up.remote()  # constructed: the model is loaded
            self.servers = [handle]
            self._server_handle = handle
            self._server_address = name

    return HFRolloutReplica


def _adapter_class() -> type:
    import ray
    import torch
    from verl.workers.rollout.base import BaseRollout

    class HFRolloutAdapter(BaseRollout):
        """The trainer side of the rollout: each update's weights go to this rank's replica server."""

        def __init__(self, config: Any, model_config: Any, device_mesh: Any = None, replica_rank: int = -1,
                     **unused: Any) -> None:
            # ``replica_rank`` comes from a standalone replica's worker (OPD's teacher), else from the trainer rank
            super().__init__(config, model_config, device_mesh)
            rank = _rank("RANK")
            world = config.tensor_model_parallel_size * config.data_parallel_size * \
                config.pipeline_model_parallel_size
            self.replica_rank = replica_rank if replica_rank >= 0 else rank // world
            self.is_leader = rank % world == 0

        async def resume(self, tags: list[str]) -> None: ...

        async def release(self) -> None: ...

        async def update_weights(self, weights: Any, **kwargs: Any) -> None:
            # every rank walks the generator (FSDP gathers each tensor collectively); the leader sends them
            state = {}
            for name, tensor in weights:
                full = tensor.full_tensor() if hasattr(tensor, "full_tensor") else tensor
                state[name] = full.detach().to("cpu", torch.float32, copy=True)
            if self.is_leader:
                server = ray.get_actor(_server_name(self.replica_rank))
                await server.load_weights.remote(state, kwargs.get("global_steps"))

    return HFRolloutAdapter


HFRolloutReplica: type | None = None
HFRolloutAdapter: type | None = None


def _install_rollout() -> None:
    global HFRolloutReplica, HFRolloutAdapter
    from verl.workers.rollout import base, replica

    HFRolloutReplica, HFRolloutAdapter = _replica_class(), _adapter_class()
    base._ROLLOUT_REGISTRY[(ROLLOUT_NAME, "async")] = f"{__name__}.HFRolloutAdapter"
    replica.RolloutReplicaRegistry.register(ROLLOUT_NAME, lambda: HFRolloutReplica)


def install() -> None:
    """Put verl on CPU in this process (idempotent). Called on import when ``PIPELINE_VERL_CPU=1``."""
    global _installed
    if _installed:
        return
    _install_platform()
    _install_gloo()
    _install_engine()
    _install_rollout()
    _installed = True
    log.info("verl CPU support installed (%s=1)", ENV)


if cpu_enabled():
    install()
