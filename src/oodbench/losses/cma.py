"""CMA: cross-modal alignment, FLYP's contrastive fine-tuning loss plus a log-sum-exp term.

Kim et al., "Enhanced OoD Detection through Cross-Modal Alignment of Multi-Modal
Representations", CVPR 2025 (arXiv 2503.18817). Checked against the official code
(github.com/ma-kjh/CMA-OoDD, ``utils/train_utils.py``, function ``train``).

For a batch of B images with embeddings u_i and the text embeddings v_i of their class prompts
("a photo of a {class}"), both L2-normalised, and the CLIP logit scale s = exp(logit_scale):

    l_ij = s * <u_i, v_j>                                 (B, B): image i vs the prompt of sample j
    L    = 1/2 [CE(l, arange(B)) + CE(l^T, arange(B))]    FLYP (Goyal et al., CVPR 2023)
           + lam / (2B) * sum_k ( -LSE_j l_kj  -  LSE_i l_ik )

i.e. the official ``(CE_text + lam * mean(-LSE rows of l^T)) / 2 + (CE_image + lam * mean(-LSE
rows of l)) / 2``. With ``lam = 0`` this is FLYP's loss. The target of row i is column i even
when another sample of the batch has the same class: same-class pairs count as negatives, as in
the official code. The paper's default is lam = 0.001 (the official script's command-line
default is 0.0, i.e. FLYP). The loss trains every parameter of both towers and the logit scale
(``oodbench.train`` with this loss runs :mod:`oodbench.train.methods.cma`).
"""

from __future__ import annotations

from typing import Annotated

import torch
import torch.nn.functional as F

from oodbench.constraints import Integer, NonNegative, Options, Text
from oodbench.errors import InvalidInputError
from oodbench.losses.base import Loss, register


def cma_loss(logits_per_image: torch.Tensor, lam: float) -> torch.Tensor:
    """The CMA loss of the (B, B) image-to-text logit matrix (see the module docstring)."""
    targets = torch.arange(len(logits_per_image), device=logits_per_image.device)
    per_text = logits_per_image.T
    contrastive = 0.5 * (F.cross_entropy(logits_per_image, targets)
                         + F.cross_entropy(per_text, targets))
    if lam == 0:
        return contrastive
    lse = torch.logsumexp(logits_per_image, dim=1) + torch.logsumexp(per_text, dim=1)
    return contrastive - lam * 0.5 * lse.mean()


#: ``head_templates``: CMA's official head ("The nice {}"), or the model's own templates
HEAD_TEMPLATES = ("cma", "model")


@register
class CMA(Loss):
    """Cross-modal alignment: FLYP's symmetric contrastive loss + lam * (-LSE) (CVPR 2025)."""

    name = "cma"
    paper = "Kim et al., CVPR 2025, arXiv 2503.18817 (CMA); FLYP at lam=0"
    method = "cma"
    unused_settings = {
        **dict.fromkeys(("warmup_epochs", "warmup_fraction"),
                        "its warm-up is the loss option warmup_steps (in optimisation steps, "
                        "the official 500): set that instead"),
        "trainable": "CMA trains every parameter of both CLIP towers",
    }

    #: weight of the log-sum-exp term
    lam: NonNegative = 0.001
    #: the class prompt of the text side during training
    train_prompt: Annotated[str, Text("a string with exactly one '{}' (the class name's place)",
                                      test=lambda text: text.count("{}") == 1)] = "a photo of a {}"
    #: the learning-rate warm-up in optimisation steps (the official 500), used instead of
    #: ``warmup_epochs``
    warmup_steps: Annotated[int, Integer(min=0)] = 500
    #: the zero-shot head of the fine-tuned model: ``"cma"``, the official evaluation's one
    #: template "The nice {}" (:mod:`oodbench.train.cma_head`), or ``"model"``, the model's
    #: own templates
    head_templates: Annotated[str, Options(*HEAD_TEMPLATES)] = "cma"

    def _loss(self, logits, labels, outlier_logits):  # type: ignore[no-untyped-def]
        """``logits``: the (B, B) image-to-text logits; ``labels`` must be ``arange(B)`` (each
        image's own prompt is column i)."""
        if logits.shape[0] != logits.shape[1] or not torch.equal(
                labels, torch.arange(len(labels), device=labels.device)):
            raise InvalidInputError(
                "cma: expects the square (B, B) image-to-text logits and labels arange(B); "
                f"got logits {tuple(logits.shape)}")
        return cma_loss(logits, self.lam)
