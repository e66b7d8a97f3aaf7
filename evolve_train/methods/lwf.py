"""Learning without forgetting (``lwf``): distil toward the previous time step's model on the current batch.

At time step k (k >= 1), ``prepare_model`` keeps a frozen copy of the model entering the step (it holds step
k-1's weights, in a continuing and in a resumed run alike, so nothing needs saving), in eval mode, in
``method.lwf.teacher_dtype``. Every micro-batch adds

    weight * T^2 * KL(softmax(teacher / T) || softmax(student / T))     (``targets=kl``, the default)
    weight * CE(student, argmax(teacher))                              (``targets=argmax``, TiC-LM's other option)

averaged over the batch's loss tokens (the tokens whose label is not -100: the masked entity of a masked-entity
pair, every token of packed ``clm`` text; for causal models the logits at position i predict label i+1, as in
the language-model loss). The student's logits are the ones the loop's forward already computed; the teacher
runs one extra forward under ``torch.no_grad`` (no gradient and no optimizer state for it). Where the loss is
chunked (``models/head.py``: vocabularies of 16k and up), the loop keeps the student's last hidden states instead
of logits, the teacher gives its own, and the term is computed a chunk of loss tokens at a time. Listed with other
strategies (``method.strategies=[lora, lwf]``, ``[full, replay, lwf]``) it distils the model they train; a
fresh LoRA adapter (B = 0) leaves the teacher's function that of step k-1.

Memory: a full copy of the model per process (half with ``teacher_dtype=bfloat16``); under FSDP2 the teacher
is not sharded. Step 0 has no previous step: no term (unless ``method.at_step0``, when it is skipped too).
"""

from __future__ import annotations

import copy
import logging
from typing import Optional

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

from evolve_train.methods.base import Strategy, register_strategy
from evolve_train.models import head
from evolve_train.models.head import HeadInputs, head_inputs, labelled_rows

log = logging.getLogger(__name__)

IGNORE = -100


def distillation(
    student_logits: torch.Tensor,
    teacher_logits: torch.Tensor,
    labels: torch.Tensor,
    temperature: float = 1.0,
    targets: str = "kl",
    causal: bool = True,
) -> torch.Tensor:
    """The mean distillation term over the loss tokens (``labels != -100``), in float32."""
    if causal:  # logits at i predict token i+1
        student_logits, teacher_logits, labels = student_logits[:, :-1], teacher_logits[:, :-1], labels[:, 1:]
    mask = labels != IGNORE
    student, teacher = student_logits[mask].float(), teacher_logits[mask].float()
    if student.shape[0] == 0:
        return student.sum() * 0.0
    if str(targets) == "argmax":
        return F.cross_entropy(student, teacher.argmax(dim=-1))
    t = float(temperature)
    log_student = F.log_softmax(student / t, dim=-1)
    log_teacher = F.log_softmax(teacher / t, dim=-1)
    return F.kl_div(log_student, log_teacher, log_target=True, reduction="batchmean") * (t * t)


def _chunk_distillation(student, s_weight, s_bias, teacher, t_weight, t_bias, temperature: float, argmax: bool):
    """The summed distillation term of one chunk of rows (student and teacher logits built here)."""
    student_logits = F.linear(student, s_weight, s_bias).float()
    with torch.no_grad():
        teacher_logits = F.linear(teacher, t_weight, t_bias).float()
    if argmax:
        return F.cross_entropy(student_logits, teacher_logits.argmax(dim=-1), reduction="sum")
    log_student = F.log_softmax(student_logits / temperature, dim=-1)
    log_teacher = F.log_softmax(teacher_logits / temperature, dim=-1)
    return F.kl_div(log_student, log_teacher, log_target=True, reduction="sum") * (temperature * temperature)


def chunked_distillation(
    student: HeadInputs, teacher: HeadInputs, temperature: float = 1.0, targets: str = "kl", chunk: Optional[int] = None
) -> torch.Tensor:
    """:func:`distillation` of a causal model from the hidden states and heads of student and teacher,
    ``chunk`` loss tokens of logits at a time (the student's recomputed in the backward): no full logits."""
    s_rows, _ = labelled_rows(student.hidden, student.labels)
    t_rows, _ = labelled_rows(teacher.hidden.to(s_rows.dtype), teacher.labels)
    if s_rows.shape[0] == 0:
        return student.hidden.sum() * 0.0
    total = s_rows.new_zeros((), dtype=torch.float32)
    s_head, t_head, chunk = student.head, teacher.head, chunk or head.LOSS_CHUNK
    for start in range(0, s_rows.shape[0], chunk):
        args = (s_rows[start : start + chunk], s_head.weight, s_head.bias, t_rows[start : start + chunk])
        args += (t_head.weight.to(s_rows.dtype), None if t_head.bias is None else t_head.bias.to(s_rows.dtype))
        with student.precision():
            total = total + checkpoint(
                _chunk_distillation, *args, float(temperature), str(targets) == "argmax", use_reentrant=False
            )
    return total / s_rows.shape[0]


@register_strategy("lwf")
class LwF(Strategy):
    def __init__(self, cfg):
        super().__init__(cfg)
        self.c = cfg.lwf  # ranges and choices: checked by the schema (config.py: LwfConfig)
        self.teacher: Optional[torch.nn.Module] = None

    def prepare_model(self, model, step):
        self.teacher = None
        if step == 0 or self.c.weight == 0:
            return model
        dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16}[str(self.c.teacher_dtype)]
        teacher = copy.deepcopy(model).to(dtype)
        teacher.eval()
        teacher.requires_grad_(False)
        self.teacher = teacher
        self.causal = not bool(getattr(getattr(model, "config", None), "is_encoder_decoder", False))
        log.info(
            "lwf (step %d): teacher = the model entering the step (%s, eval mode), weight %g, temperature %g, "
            "targets %s",
            step,
            dtype,
            self.c.weight,
            self.c.temperature,
            self.c.targets,
        )
        return model

    def batch_loss(self, model, batch, outputs, optimizer_step):
        if self.teacher is None or outputs is None:
            return None
        if isinstance(outputs, HeadInputs):  # the chunked loss's hidden states: the teacher's the same way
            with torch.no_grad():
                teacher = head_inputs(self.teacher, self.teacher, batch)
            return self.c.weight * chunked_distillation(outputs, teacher, self.c.temperature, self.c.targets)
        if getattr(outputs, "logits", None) is None:
            return None
        inputs = batch if not self.causal else {k: v for k, v in batch.items() if k != "labels"}
        with torch.no_grad():
            teacher_logits = self.teacher(**inputs, use_cache=False).logits
        return self.c.weight * distillation(
            outputs.logits, teacher_logits, batch["labels"], self.c.temperature, self.c.targets, causal=self.causal
        )

    def forward_parameters(self) -> int:
        return 0 if self.teacher is None else sum(p.numel() for p in self.teacher.parameters())

    def after_step(self, model, step, examples):
        self.teacher = None  # a full copy of the weights: free it
        return model
