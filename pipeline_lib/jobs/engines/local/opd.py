"""On-policy distillation (OPD, paper App. B): per-token reverse KL to a teacher along student rollouts.

    python -m pipeline_lib.jobs.engines.local.opd --spec JSON --data .../rl_train.parquet \
        --teacher .../opd_teacher/seed0/final --init .../sft/seed0/final --run-dir .../opd/seed0 --seed 0

The student samples M responses per prompt exactly as the RL methods do; at every response
position the loss is ``KL(pi_student(. | prefix) || pi_teacher(. | prefix))`` over the whole
vocabulary (the teacher is queried on the student's own prefixes and gets no gradient), aggregated
like the RL loss. The verifier's rewards are logged but never trained on. The tiny teacher is a
longer-trained tiny model this pipeline trains itself (rule ``train_opd_teacher``); the paper's is Qwen3-8B.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
import torch.nn.functional as F

from pipeline_lib.core.model import load_model
from pipeline_lib.core.rl.losses import PolicyLossConfig, aggregate
from pipeline_lib.core.run_spec import RunSpec
from pipeline_lib.jobs.engines.local.rl import GroupRLMethod, StepContext, method_main

__all__ = ["OnPolicyDistillation", "reverse_kl_per_token"]


def reverse_kl_per_token(student_logits: torch.Tensor, teacher_logits: torch.Tensor, response_mask: torch.Tensor
                         ) -> torch.Tensor:
    """[N, L] reverse KL of the next-token distributions that produced each response token (0 elsewhere).

    ``*_logits`` are a causal LM's [N, L, V] outputs on the same ids: position t-1 predicts token t.
    """
    student = F.log_softmax(student_logits[:, :-1].float(), dim=-1)
    teacher = F.log_softmax(teacher_logits[:, :-1].float(), dim=-1)
    kl = (student.exp() * (student - teacher)).sum(-1)
    out = torch.zeros_like(response_mask, dtype=kl.dtype)
    out[:, 1:] = kl * response_mask[:, 1:]
    return out


class OnPolicyDistillation(GroupRLMethod):
    kind = "opd"
    uses_reference = False  # the teacher is the only anchor

    def __init__(self, spec: RunSpec, teacher: Path) -> None:
        super().__init__(spec)
        self.teacher_path = teacher
        self.teacher: torch.nn.Module | None = None

    def prepare(self, ctx: StepContext) -> None:
        self.teacher = load_model(self.teacher_path).eval()
        for name in ("vocab_size", "eos_token_id"):
            if getattr(self.teacher.config, name) != getattr(ctx.model.config, name):
                raise ValueError(f"teacher {self.teacher_path} has {name}={getattr(self.teacher.config, name)}, the "
                                 f"student {getattr(ctx.model.config, name)}: they must share one tokenizer")

    def loss(self, model: torch.nn.Module, ids: torch.Tensor, attention: torch.Tensor, response_mask: torch.Tensor,
             old_logprobs: torch.Tensor, advantages: torch.Tensor, group_ids: torch.Tensor,
             ref_logprobs: torch.Tensor | None, config: PolicyLossConfig) -> tuple[torch.Tensor, dict[str, float]]:
        assert self.teacher is not None, "prepare() loads the teacher"
        student_logits = model(input_ids=ids, attention_mask=attention).logits
        with torch.no_grad():
            teacher_logits = self.teacher(input_ids=ids, attention_mask=attention).logits
        per_token = reverse_kl_per_token(student_logits, teacher_logits, response_mask)
        loss = aggregate(per_token, response_mask, config.aggregation, group_ids)
        return loss, {"actor/distillation/loss": float(loss.detach())}  # verl's OPD logs it under this name


def main(argv: list[str] | None = None) -> int:
    return method_main(argv, module="pipeline_lib.jobs.engines.local.opd", description=__doc__, step_name="train_opd",
                       extra_input=("teacher", "HF directory of the teacher model"),
                       make_method=OnPolicyDistillation, tracked_file="model.safetensors")


if __name__ == "__main__":
    sys.exit(main())
