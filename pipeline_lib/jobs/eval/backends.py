"""Generation backends behind one interface: ``generate(prompts, samples, greedy) -> [[Generation]]``.

* ``hf``: the local engine's transformers model, batched, on CPU (the tiny default);
* ``vllm``: vLLM's offline ``LLM.chat`` on GPU with the config's sampling parameters;
* ``server``: an OpenAI-compatible chat endpoint (e.g. ``vllm serve`` on the checkpoint, started for the job
  with ``eval.server.serve``), through the pipeline's one LLM client (retries, concurrency, resumable cache).

Every backend returns the text and its length in generated tokens, so the generations file, scoring and
metrics are identical whichever backend produced them.
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from pipeline_lib.core.llm_client import ChatRequest, EndpointConfig, ResponseCache, run_chat_requests
from pipeline_lib.core.model import encode_prompts, generate, load_model
from pipeline_lib.jobs.judge.serve import served_endpoint

__all__ = ["Backend", "Generation", "open_backend", "vllm_sampling_params"]

Messages = Sequence[dict[str, str]]


@dataclass(frozen=True)
class Generation:
    text: str
    tokens: int


class Backend(Protocol):
    def generate(self, prompts: Sequence[Messages], *, samples: int, greedy: bool) -> list[list[Generation]]:
        """``samples`` generations per prompt, in prompt order."""
        ...


class HFBackend:
    """Batched KV-cached generation with the local engine's model (seeded once by the caller via torch)."""

    def __init__(self, model_dir: Path, spec: dict[str, Any]) -> None:
        from transformers import AutoTokenizer

        if spec.get("top_p", 1.0) != 1.0:
            raise ValueError("eval.top_p != 1 is not supported by the hf backend (pure temperature sampling)")
        self.tokenizer = AutoTokenizer.from_pretrained(model_dir)
        self.model = load_model(model_dir)
        self.spec = spec

    def generate(self, prompts: Sequence[Messages], *, samples: int, greedy: bool) -> list[list[Generation]]:
        prompt_ids = encode_prompts(self.tokenizer, [list(p) for p in prompts])
        expanded = [row for row in range(len(prompts)) for _ in range(samples)]
        out: list[list[Generation]] = [[] for _ in prompts]
        batch = self.spec["batch_size"]
        for start in range(0, len(expanded), batch):
            rows = expanded[start:start + batch]
            responses = generate(self.model, [prompt_ids[r] for r in rows], max_new_tokens=self.spec["max_new_tokens"],
                                 greedy=greedy, temperature=self.spec["temperature"],
                                 eos_id=self.tokenizer.eos_token_id, pad_id=self.tokenizer.pad_token_id)
            for row, response in zip(rows, responses, strict=True):
                out[row].append(Generation(self.tokenizer.decode(response, skip_special_tokens=True), len(response)))
        return out


def vllm_sampling_params(spec: dict[str, Any], *, samples: int, greedy: bool, seed: int) -> dict[str, Any]:
    """Keyword arguments of ``vllm.SamplingParams`` for one evaluation mode (greedy = temperature 0)."""
    params = {"n": samples, "max_tokens": spec["max_new_tokens"], "seed": seed,
              "temperature": 0.0 if greedy else spec["temperature"], "top_p": 1.0 if greedy else spec["top_p"]}
    return params | dict(spec["vllm"].get("sampling", {}))


class VLLMBackend:
    def __init__(self, model_dir: Path, spec: dict[str, Any], seed: int) -> None:
        try:
            from vllm import LLM
        except ImportError as exc:
            raise ImportError("eval.backend 'vllm' needs vLLM (the GPU environment envs/eval.yaml or the `gpu` extra); "
                              "use eval.backend 'hf' on CPU") from exc
        engine = spec["vllm"]
        self.llm = LLM(model=str(model_dir), seed=seed, tensor_parallel_size=engine["tensor_parallel_size"],
                       gpu_memory_utilization=engine["gpu_memory_utilization"], max_model_len=engine["max_model_len"],
                       dtype=engine["dtype"])
        self.spec, self.seed = spec, seed

    def generate(self, prompts: Sequence[Messages], *, samples: int, greedy: bool) -> list[list[Generation]]:
        from vllm import SamplingParams

        params = SamplingParams(**vllm_sampling_params(self.spec, samples=samples, greedy=greedy, seed=self.seed))
        outputs = self.llm.chat([list(p) for p in prompts], params, use_tqdm=True)
        return [[Generation(c.text, len(c.token_ids)) for c in output.outputs] for output in outputs]


class ServerBackend:
    """One chat request per (prompt, sample); sample k carries seed + k so the server's sampling is reproducible."""

    def __init__(self, endpoint: dict[str, Any], spec: dict[str, Any], seed: int, cache: Path) -> None:
        self.endpoint = EndpointConfig.from_config(endpoint, "eval.backend 'server'")
        self.cache = ResponseCache(cache)
        self.spec, self.seed = spec, seed

    def generate(self, prompts: Sequence[Messages], *, samples: int, greedy: bool) -> list[list[Generation]]:
        import dataclasses

        from tqdm import tqdm

        results: list[list[Generation]] = [[] for _ in prompts]
        for k in range(samples):
            sampling = {"max_tokens": self.spec["max_new_tokens"], "seed": self.seed + k,
                        "temperature": 0.0 if greedy else self.spec["temperature"],
                        "top_p": 1.0 if greedy else self.spec["top_p"], **self.endpoint.sampling}
            endpoint = dataclasses.replace(self.endpoint, sampling=sampling)
            requests = [ChatRequest(tuple(dict(m) for m in p)) for p in prompts]
            with tqdm(total=len(prompts), desc=f"{'greedy' if greedy else 'sample'} {k}", unit="prompt") as bar:
                responses = run_chat_requests(endpoint, requests, self.cache, on_done=bar.update)
            failed = [i for i, r in enumerate(responses) if "error" in r]
            if failed:
                raise RuntimeError(f"{len(failed)} generation request(s) failed after retries, e.g. prompt "
                                   f"{failed[0]}: {responses[failed[0]]['error']}; rerun to resume (finished "
                                   "ones are cached)")
            for row, response in enumerate(responses):
                tokens = response.get("completion_tokens")
                if tokens is None:
                    raise RuntimeError("the server reports no usage.completion_tokens; the answer length is unknown")
                results[row].append(Generation(response["content"], int(tokens)))
        return results


def _weights_digest(model_dir: Path) -> str:
    """Part of the server backend's cache name, so a retrained checkpoint never reuses old generations."""
    digest = hashlib.sha256()
    for path in sorted(model_dir.glob("*.safetensors")) or sorted(model_dir.glob("*.bin")):
        with open(path, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()[:16]


@contextlib.contextmanager
def open_backend(model_dir: Path, spec: dict[str, Any], seed: int, work_dir: Path) -> Iterator[Backend]:
    backend = spec.get("backend", "hf")
    if backend == "hf":
        yield HFBackend(model_dir, spec)
    elif backend == "vllm":
        yield VLLMBackend(model_dir, spec, seed)
    elif backend == "server":
        server = spec["server"]
        cache = work_dir / f"generation_cache_{_weights_digest(model_dir)}.sqlite"
        with served_endpoint(server["endpoint"], server["serve"], work_dir / "server.log",
                             {"model": str(model_dir)}) as endpoint:
            yield ServerBackend(endpoint, spec, seed, cache)
    else:
        raise ValueError(f"unknown eval.backend {backend!r} (hf, vllm, server)")
