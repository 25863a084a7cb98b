"""RARO (paper App. B) on verl: shared-weight policy and relativistic critic as two agent loops, one GRPO update.

One model plays both roles (the critic role is switched on by ``critic_system_prompt``), and the rollout
server that generates holds the current weights, so every policy answer and every verdict comes from the
policy being trained. Per step the batch holds ``batch_size`` policy rows and ``critic_prompts_per_step``
critic rows (:class:`RaroDataset`; each row gets the task's M rollouts, so both kinds form GRPO groups):

* ``raro_policy`` (:class:`RaroPolicyLoop`): verl's single-turn rollout of the task prompt; the same server, in
  the critic role, gives one verdict on (expert answer, this answer) in a seeded random order; the reward is
  ``rewards.policy[verdict]`` (fooling the critic pays, a tie partially). The answer joins the replay buffer.
* ``raro_critic`` (:class:`RaroCriticLoop`): the row judges one (question, expert, policy answer) pair, drawn
  from the replay buffer (the row's replay slot, ``round(replay_fraction * critic_prompts_per_step)`` slots per
  step, while the buffer holds enough) or else a fresh answer the current policy writes to the row's own question.
  The response trained on is the verdict; the reward is ``rewards.critic[verdict]``. All M rollouts of a row
  (same ``uid``) see the same pair in the same order: the buffer assigns it once, the first rollout that needs a
  fresh answer writes it and the others wait for it.

Verdict parsing, the critic prompt and the outcome tables are RARO's own, shared with the local engine
(:mod:`pipeline_lib.jobs.methods.raro`), so both engines implement one RARO. The rewards become
``AgentLoopOutput.reward_score`` (verl's ``rm_scores``), so verl's reward loop is skipped for training rows;
validation rows carry no ``agent_name`` and go through verl's ``single_turn_agent`` and the task's verifier, so
``val-core`` stays task accuracy.

The replay buffer (:class:`ReplayBuffer`) is one named Ray actor shared by all agent loop workers, created by
:class:`RaroAgentLoopManager`, which also tells it where each training step starts and ends: the answers of
step t become replayable from step t+1 on (added in a fixed order, so which pairs a step replays does not
depend on which rollout finished first), and the buffer after step t is written to
``<run_dir>/raro_replay/after_step_<t>.json``; a resumed run (verl restarts at its last checkpoint's step k+1)
reloads the buffer after step k.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from uuid import uuid4

import numpy as np
from verl.experimental.agent_loop.agent_loop import AgentLoopManager, AgentLoopOutput
from verl.experimental.agent_loop.single_turn_agent_loop import SingleTurnAgentLoop
from verl.utils.dataset.rl_dataset import RLHFDataset
from verl.utils.ray_utils import auto_await

from pipeline_lib.core.io import write_json
from pipeline_lib.jobs.methods.raro import VERDICTS, critic_messages, outcome_rewards, parse_verdict

__all__ = [
    "AGENT_LOOP_CONFIG",
    "BUFFER_ACTOR",
    "CRITIC_LOOP",
    "POLICY_LOOP",
    "MixSchedule",
    "RaroAgentLoopManager",
    "RaroCriticLoop",
    "RaroDataset",
    "RaroLoopSettings",
    "RaroPolicyLoop",
    "ReplayBuffer",
    "check_training_data",
    "start_replay_actor",
]

log = logging.getLogger(__name__)

POLICY_LOOP = "raro_policy"
CRITIC_LOOP = "raro_critic"
#: The agent loop registry handed to verl (``actor_rollout_ref.rollout.agent.agent_loop_config_path``).
AGENT_LOOP_CONFIG = Path(__file__).with_name("raro_agent_loops.yaml")
#: Name of the replay buffer actor (Ray namespaces it per job, so concurrent runs do not share it).
BUFFER_ACTOR = "raro_replay_buffer"
#: How long the other rollouts of a critic row wait for the one writing its fresh answer.
FRESH_ANSWER_TIMEOUT_S = 1800.0


# --- settings ------------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class RaroLoopSettings:
    """What the verl RARO loops and the buffer need, read from the verl config (``+raro`` from
    translate.raro_overrides, data.seed, trainer.save_freq); the plan-side settings are core.baselines.RaroSettings."""

    critic_system_prompt: str
    critic_max_new_tokens: int
    replay_size: int
    policy_rewards: dict[str, float]
    critic_rewards: dict[str, float]
    state_dir: str | None
    seed: int
    save_freq: int

    @classmethod
    def from_config(cls, config: Any) -> RaroLoopSettings:
        raro = config.get("raro")
        if raro is None:
            raise KeyError("the verl config has no `raro` section (set by translate.raro_overrides as +raro=...)")
        rewards = raro["rewards"]
        for role in ("policy", "critic"):
            missing = [v for v in VERDICTS if v not in rewards[role]]
            if missing:
                raise KeyError(f"raro.rewards.{role} lacks verdict(s) {missing}")
        seed = config.data.get("seed")
        return cls(critic_system_prompt=str(raro["critic_system_prompt"]),
                   critic_max_new_tokens=int(raro["critic_max_new_tokens"]), replay_size=int(raro["replay_size"]),
                   policy_rewards={k: float(v) for k, v in rewards["policy"].items()},
                   critic_rewards={k: float(v) for k, v in rewards["critic"].items()},
                   state_dir=raro.get("state_dir"), seed=int(seed if seed is not None else 0),
                   save_freq=int(config.trainer.get("save_freq", -1)))


# --- the batch: policy rows and critic rows, deterministic by seed ---------------------------------------------------

@dataclass(frozen=True)
class MixSchedule:
    """Dataset position -> (agent loop, task row, replay slot) for ``steps`` batches of ``policy_per_step`` policy
    rows then ``critic_per_step`` critic rows (read in order: ``data.shuffle=False``).

    Policy rows walk a fresh seeded permutation of the task rows per pass (as the GRPO runs' shuffled sampler
    does); each step's critic rows are distinct task rows drawn with a seeded generator. The first
    ``replay_slots`` critic rows of a step are the replay rows (slot 0, 1, ...); the rest (slot -1) judge fresh
    answers.
    """

    rows: int
    policy_per_step: int
    critic_per_step: int
    replay_slots: int
    steps: int
    seed: int

    def __post_init__(self) -> None:
        if self.rows < max(1, self.critic_per_step):
            raise ValueError(f"RARO needs at least {max(1, self.critic_per_step)} task rows (critic rows are distinct "
                             f"within a step), the training data has {self.rows}")
        if not 0 <= self.replay_slots <= self.critic_per_step:
            raise ValueError(f"replay_slots {self.replay_slots} not in [0, critic_per_step={self.critic_per_step}]")
        if self.policy_per_step < 1 or self.steps < 1:
            raise ValueError(f"policy_per_step ({self.policy_per_step}) and steps ({self.steps}) must be >= 1")

    @property
    def block(self) -> int:
        return self.policy_per_step + self.critic_per_step

    def __len__(self) -> int:
        return self.steps * self.block

    @functools.lru_cache(maxsize=2)  # noqa: B019 - frozen and small; positions are read in order
    def _permutation(self, epoch: int) -> np.ndarray:
        return np.random.default_rng([self.seed, 0, epoch]).permutation(self.rows)

    @functools.lru_cache(maxsize=4)  # noqa: B019
    def _critic_rows(self, step: int) -> np.ndarray:
        return np.random.default_rng([self.seed, 1, step]).choice(self.rows, size=self.critic_per_step, replace=False)

    def item(self, position: int) -> tuple[str, int, int]:
        """(agent loop, task row, replay slot or -1) of dataset position ``position``."""
        if not 0 <= position < len(self):
            raise IndexError(f"position {position} outside the {len(self)} rows of the RARO schedule")
        step, offset = divmod(position, self.block)
        if offset < self.policy_per_step:
            epoch, k = divmod(step * self.policy_per_step + offset, self.rows)
            return POLICY_LOOP, int(self._permutation(epoch)[k]), -1
        j = offset - self.policy_per_step
        return CRITIC_LOOP, int(self._critic_rows(step)[j]), j if j < self.replay_slots else -1


def _same_files(a: Any, b: Any) -> bool:
    def norm(x: Any) -> list[str]:
        items = [x] if isinstance(x, str | Path) else list(x or [])
        return [str(Path(str(i)).expanduser().resolve()) for i in items]

    return b is not None and norm(a) == norm(b)


class RaroDataset(RLHFDataset):
    """verl's RL dataset; for the training files, laid out by :class:`MixSchedule` with each row's ``agent_name``
    (and ``raro_slot``) set. Rows are filtered exactly as in the GRPO runs (verl's overlong-prompt filter runs
    first). Validation files (any other path) are verl's dataset unchanged."""

    def __init__(self, data_files: Any, tokenizer: Any, config: Any, processor: Any = None,
                 max_samples: int = -1) -> None:
        super().__init__(data_files=data_files, tokenizer=tokenizer, config=config, processor=processor,
                         max_samples=max_samples)
        mix = config.get("raro")
        self.schedule: MixSchedule | None = None
        if mix is not None and _same_files(data_files, config.get("train_files")):
            seed = config.get("seed")
            self.schedule = MixSchedule(rows=len(self.dataframe), policy_per_step=int(mix["policy_per_step"]),
                                        critic_per_step=int(mix["critic_per_step"]),
                                        replay_slots=int(mix["replay_slots"]), steps=int(mix["steps"]),
                                        seed=int(seed if seed is not None else 0))

    def __len__(self) -> int:
        return len(self.schedule) if self.schedule is not None else super().__len__()

    def __getitem__(self, item: int) -> dict[str, Any]:
        if self.schedule is None:
            return super().__getitem__(item)
        loop, row, slot = self.schedule.item(int(item))
        out = super().__getitem__(row)
        out["agent_name"] = loop
        out["raro_slot"] = slot
        return out


def check_training_data(path: str | Path) -> int:
    """Every row of ``path`` has an expert answer (``extra_info.reference``); the row count. Run before verl starts,
    so a task without demonstrations fails in seconds rather than on the cluster."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    table = pq.read_table(path, columns=["extra_info"])
    column = table.column("extra_info")
    if "reference" not in [f.name for f in column.type]:
        raise KeyError(f"{path}: RARO needs each row's expert answer in extra_info.reference; this file has none "
                       f"(extra_info fields: {[f.name for f in column.type]})")
    reference = pc.struct_field(column, "reference")
    empty = pc.or_(pc.is_null(reference), pc.equal(pc.utf8_length(reference), 0))
    bad = int(pc.sum(empty).as_py() or 0)
    if bad:
        first = int(pc.index(empty, True).as_py())
        raise ValueError(f"{path}: {bad} of {table.num_rows} rows have no expert answer in extra_info.reference "
                         f"(first: row {first})")
    return table.num_rows


# --- the replay buffer -----------------------------------------------------------------------------------------------

class ReplayBuffer:
    """FIFO of past (question, expert, policy answer) pairs plus the per-step bookkeeping of the critic rows.

    Its methods are coroutines, so as a Ray actor it is an async actor: a rollout waiting for a fresh answer
    does not block the others. Within a step the buffer is read-only; the step's answers are appended at
    :meth:`end_step`, sorted by (row index, answer), and the result saved to ``state_dir``.
    """

    def __init__(self, size: int, seed: int, state_dir: str | None = None, save_freq: int = -1) -> None:
        if size < 1:
            raise ValueError(f"replay_size must be >= 1, got {size}")
        self.size, self.seed, self.save_freq = int(size), int(seed), int(save_freq)
        self.state_dir = Path(state_dir) if state_dir else None
        self.pairs: list[dict[str, Any]] = []
        self.pending: list[dict[str, Any]] = []
        self.step = 0  # the step being rolled out
        self.completed = 0  # the last step whose answers are in `pairs`
        self.order = np.zeros(0, dtype=np.int64)
        self.claims: dict[str, dict[str, Any]] = {}
        self.ready: dict[str, asyncio.Event] = {}

    # step boundaries (RaroAgentLoopManager) ---------------------------------------------------------------------
    async def begin_step(self, step: int) -> int:
        """Start rolling out ``step``; a fresh actor (resumed run) first reloads the buffer after ``step - 1``."""
        if step != self.completed + 1:
            self._load(step - 1)
        self.step, self.pending, self.claims, self.ready = step, [], {}, {}
        self.order = np.random.default_rng([self.seed, step]).permutation(len(self.pairs))
        return len(self.pairs)

    async def end_step(self, step: int) -> int:
        """Append ``step``'s answers (FIFO, ``size`` kept) and save the buffer; its new length."""
        if step != self.step:
            raise RuntimeError(f"RARO replay buffer: end of step {step} but step {self.step} was begun")
        added = sorted(self.pending, key=lambda p: (p["index"], p["answer"], p["expert"]))
        self.pairs = (self.pairs + added)[-self.size:]
        self.pending, self.completed = [], step
        self._save(step)
        return len(self.pairs)

    # rollouts (agent loops) -----------------------------------------------------------------------------------------
    async def add(self, index: int, question: str, expert: str, answer: str) -> bool:
        """Record a policy answer of this step; whether the expert goes first when the critic judges it (seeded by
        seed, step, row and answer, so it does not depend on arrival order)."""
        self.pending.append({"index": int(index), "question": question, "expert": expert, "answer": answer})
        key = [self.seed, self.step, int(index), zlib.crc32(answer.encode())]
        return bool(np.random.default_rng(key).random() < 0.5)

    async def claim(self, uid: str, index: int, slot: int) -> dict[str, Any]:
        """The pair critic row ``uid`` judges, the same for all its rollouts: ``{"pair", "expert_first",
        "replayed"}``, or ``{"produce": True, "expert_first"}`` for the first rollout of a row that needs a fresh
        answer (it must :meth:`publish` one; the row's other rollouts wait here until it does)."""
        uid = str(uid)
        if uid in self.claims:
            await asyncio.wait_for(self.ready[uid].wait(), FRESH_ANSWER_TIMEOUT_S)
            claim = self.claims[uid]
            if claim.get("pair") is None:
                raise RuntimeError(f"RARO critic row {uid}: the rollout writing its fresh answer failed")
            return claim
        self.ready[uid] = asyncio.Event()
        expert_first = bool(np.random.default_rng([self.seed, self.step, int(index)]).random() < 0.5)
        if 0 <= slot < len(self.order):
            self.claims[uid] = {"pair": dict(self.pairs[int(self.order[slot])]), "expert_first": expert_first,
                                "replayed": True}
            self.ready[uid].set()
            return self.claims[uid]
        self.claims[uid] = {"pair": None, "expert_first": expert_first, "replayed": False}
        return {"produce": True, "expert_first": expert_first}

    async def publish(self, uid: str, pair: dict[str, Any] | None) -> None:
        """The fresh pair of critic row ``uid`` (None: it could not be written; the waiting rollouts fail)."""
        self.claims[str(uid)]["pair"] = pair
        self.ready[str(uid)].set()

    async def snapshot(self) -> dict[str, Any]:
        return {"step": self.completed, "pairs": [dict(p) for p in self.pairs]}

    # persistence --------------------------------------------------------------------------------------------------
    def _path(self, step: int) -> Path:
        assert self.state_dir is not None
        return self.state_dir / f"after_step_{step:08d}.json"

    def _save(self, step: int) -> None:
        if self.state_dir is None:
            return
        write_json(self._path(step), {"step": step, "size": self.size, "pairs": self.pairs})
        # keep what a resume can need: the newest file and those of the last two checkpoint steps
        keep = {step}
        if self.save_freq > 0:
            last = step - step % self.save_freq
            keep |= {last, last - self.save_freq}
        for old in self.state_dir.glob("after_step_*.json"):
            number = int(old.stem.rsplit("_", 1)[1])
            if number < step and number not in keep:
                old.unlink(missing_ok=True)

    def _load(self, step: int) -> None:
        if step <= 0:
            self.pairs = []
        else:
            if self.state_dir is None or not self._path(step).is_file():
                raise FileNotFoundError(
                    f"RARO replay buffer: training resumes at step {step + 1} but the buffer after step {step} is not "
                    f"in {self.state_dir} (written at the end of every step); without it the critic's replay would "
                    "silently restart empty")
            try:
                self.pairs = list(json.loads(self._path(step).read_text(encoding="utf-8"))["pairs"])[-self.size:]
            except (ValueError, KeyError, TypeError) as exc:  # written atomically, so only a damaged disk does this
                raise ValueError(f"RARO replay buffer {self._path(step)} is unreadable ({exc}); the critic's replay "
                                 "cannot be rebuilt from it: delete the run directory to train again") from exc
        self.completed = step
        log.info("RARO replay buffer: %d pairs after step %d", len(self.pairs), step)


def start_replay_actor(settings: RaroLoopSettings) -> Any:
    """The run's replay buffer as the named Ray actor the agent loops look up (the existing one if already up)."""
    import ray

    # Rollouts waiting in `claim` for a fresh answer hold one of the actor's concurrent calls each (critic rows x
    # (M - 1) of them, e.g. 64 x 15 for DeepMath): allow far more than Ray's default 1000 so `publish` always runs.
    return ray.remote(ReplayBuffer).options(name=BUFFER_ACTOR, get_if_exists=True, num_cpus=0,
                                            max_concurrency=1 << 16).remote(
        settings.replay_size, settings.seed, settings.state_dir, settings.save_freq)


class RaroAgentLoopManager(AgentLoopManager):
    """verl's agent loop manager plus the replay buffer actor and its step boundaries (training steps only)."""

    def __init__(self, config: Any, *args: Any, **kwargs: Any) -> None:
        super().__init__(config, *args, **kwargs)
        self.replay = start_replay_actor(RaroLoopSettings.from_config(config))

    @auto_await
    async def generate_sequences(self, prompts: Any) -> Any:
        if prompts.meta_info.get("validate", False):
            return await super().generate_sequences(prompts)
        step = prompts.meta_info.get("global_steps")
        if step is None:
            raise KeyError("RARO needs meta_info.global_steps on training batches (verl's ray_trainer sets it)")
        await self.replay.begin_step.remote(int(step))
        output = await super().generate_sequences(prompts)
        await self.replay.end_step.remote(int(step))
        return output


# --- the agent loops -------------------------------------------------------------------------------------------------

_ACTOR: Any = None


def _question(raw_prompt: Sequence[Mapping[str, Any]]) -> str:
    """The question as the critic sees it (the local engine's join of the prompt messages)."""
    return "\n".join(str(m["content"]) for m in raw_prompt)


def _extra_info(critic_row: int, verdict: str, replayed: bool, expert_first: bool) -> dict[str, int]:
    """Per-rollout diagnostics (verl's reward_extra_info: in the rollout dumps). Same keys for both roles: verl
    concatenates the agent loop workers' outputs key by key."""
    return {"raro_critic_row": critic_row, "raro_verdict": VERDICTS.index(verdict), "raro_replayed": int(replayed),
            "raro_expert_first": int(expert_first)}


class _RaroLoop(SingleTurnAgentLoop):
    """Shared by both roles: settings, buffer calls, the critic prompt and one verdict."""

    def __init__(self, *args: Any, replay: Any = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.settings = RaroLoopSettings.from_config(self.config)
        self.replay = replay  # a ReplayBuffer (in-process) or None: the named Ray actor

    async def _buffer(self, method: str, *args: Any) -> Any:
        global _ACTOR
        if self.replay is None:
            if _ACTOR is None:
                import ray

                _ACTOR = ray.get_actor(BUFFER_ACTOR)
            self.replay = _ACTOR
        fn = getattr(self.replay, method)
        return await (fn.remote(*args) if hasattr(fn, "remote") else fn(*args))

    def _expert(self, kwargs: Mapping[str, Any]) -> str:
        extra = dict(kwargs.get("extra_info") or {})
        reference = extra.get("reference")
        if not reference:
            raise KeyError(f"RARO needs the expert answer in extra_info.reference; row {extra.get('index')!r} has none")
        return self._clip(str(reference), self.response_length)

    def _clip(self, text: str, tokens: int) -> str:
        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        return text if len(ids) <= tokens else self.tokenizer.decode(ids[:max(tokens, 0)])

    def critic_prompt(self, question: str, expert: str, answer: str, expert_first: bool
                      ) -> tuple[list[dict[str, str]], list[int]]:
        """Critic messages (expert and answer in the given order) and their token ids, within the rollout's
        prompt length (the expert answer is shortened if the question is unusually long)."""
        for _ in range(2):
            pair = (expert, answer) if expert_first else (answer, expert)
            messages = critic_messages(self.settings.critic_system_prompt, question, *pair)
            ids = self.continuous_token_builder.build_initial_tokens(messages)
            excess = len(ids) - self.prompt_length
            if excess <= 0:
                return messages, list(ids)
            expert = self._clip(expert, len(self.tokenizer(expert, add_special_tokens=False)["input_ids"]) - excess)
        raise ValueError(f"RARO critic prompt of {len(ids)} tokens exceeds actor_rollout_ref.rollout.prompt_length "
                         f"{self.prompt_length}; raise translate.RARO_CRITIC_PROMPT_OVERHEAD")

    def critic_params(self, sampling_params: Mapping[str, Any]) -> dict[str, Any]:
        return {**sampling_params, "max_tokens": self.settings.critic_max_new_tokens}

    def _text(self, token_ids: Sequence[int]) -> str:
        return self.tokenizer.decode(list(token_ids), skip_special_tokens=True)


class RaroPolicyLoop(_RaroLoop):
    """A policy row: the task rollout, rewarded by one critic verdict on it against the expert answer."""

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        output = await super().run(dict(sampling_params), **kwargs)
        question, expert = _question(kwargs["raw_prompt"]), self._expert(kwargs)
        answer = self._text(output.response_ids)
        expert_first = await self._buffer("add", int(kwargs["index"]), question, expert, answer)
        _, prompt_ids = self.critic_prompt(question, expert, answer, expert_first)
        reply = await self.server_manager.generate(request_id=uuid4().hex, prompt_ids=prompt_ids,
                                                   sampling_params=self.critic_params(sampling_params))
        verdict = parse_verdict(self._text(reply.token_ids), expert_first)
        output.reward_score = float(outcome_rewards([verdict], self.settings.policy_rewards)[0])
        output.extra_fields["reward_extra_info"] = _extra_info(0, verdict, False, expert_first)
        return output


class RaroCriticLoop(_RaroLoop):
    """A critic row: the verdict on its (replayed or fresh) pair is the response trained on."""

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        uid = str(kwargs["uid"])
        claim = await self._buffer("claim", uid, int(kwargs["index"]), int(kwargs.get("raro_slot", -1)))
        if claim.get("produce"):
            try:
                pair = await self.fresh_pair(sampling_params, kwargs)
            except BaseException:
                await self._buffer("publish", uid, None)
                raise
            await self._buffer("publish", uid, pair)
        else:
            pair = claim["pair"]
        expert_first = bool(claim["expert_first"])
        messages, _ = self.critic_prompt(pair["question"], pair["expert"], pair["answer"], expert_first)
        output = await super().run(self.critic_params(sampling_params), **{**kwargs, "raw_prompt": messages})
        verdict = parse_verdict(self._text(output.response_ids), expert_first)
        output.reward_score = float(outcome_rewards([verdict], self.settings.critic_rewards)[0])
        output.extra_fields["reward_extra_info"] = _extra_info(1, verdict, bool(claim.get("replayed")), expert_first)
        return output

    async def fresh_pair(self, sampling_params: Mapping[str, Any], kwargs: Mapping[str, Any]) -> dict[str, Any]:
        """The current policy's answer to the row's own question (not trained on: only the verdict is)."""
        prompt_ids = await self.ct_build_initial_tokens(list(kwargs["raw_prompt"]))
        params = {k: v for k, v in sampling_params.items() if k != "max_tokens"}
        reply = await self.server_manager.generate(request_id=uuid4().hex, prompt_ids=prompt_ids,
                                                   sampling_params=params)
        answer = self._text(reply.token_ids[: self.response_length])
        return {"index": int(kwargs["index"]), "question": _question(kwargs["raw_prompt"]),
                "expert": self._expert(kwargs), "answer": answer}
