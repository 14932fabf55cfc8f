"""NPOS: LogitNorm on the ID classes plus a binary ID-vs-synthesised-outlier loss on an MLP.

Tao, Du, Zhu & Li, "Non-Parametric Outlier Synthesis", ICLR 2023 (arXiv 2303.02966). Checked
against the official code (github.com/deeplearning-wisc/npos, ``CLIP_based/OOD/train_npos.py``,
``CLIP/logitnorm_loss.py``, ``CLIP/CLIP_ft.py``; the ImageNet-1k values from
``train_npos_imagenet_1k.sh``). For ID logits z (cosine similarities to the class prompts
times any positive factor), labels y, the uncertainty MLP phi (D -> 32 -> ReLU -> 1) on the ID
embeddings and on the synthesised outliers o_1..o_M:

    L = CE( z / (t * (||z||_2 + 1e-7)), y )                              LogitNorm, t = 8
        + w * BCE_with_logits( [phi(ID); phi(o)], [1 ... 1; 0 ... 0] )    w = 0.1, mean over B + M

and only the first term before outliers exist (before ``start_epoch``, or while the class
queues fill). LogitNorm normalises each row of z. The official ``logits_compute`` divides the
image embeddings by the norm of the *whole batch* (``image_embedding.norm()``) before the dot
product with the text embeddings; that positive factor, like CLIP's per-sample normalisation
and logit scale, cancels in the row-wise normalisation, so the loss is the same up to the
1e-7; oodbench uses the classifier's own per-sample cosine logits, which do not depend on the
rest of the batch (so a data-parallel shard computes what one process does).

Layout: the head of this loss has ``num_classes + 1`` outputs, the last one phi's output, so
``logits`` is (B, C + 1) and ``outlier_logits`` (M, C + 1) (only their last column is used).
The synthesis options (queue, boundary points, k, Gaussian samples, what is frozen) are
documented in :mod:`oodbench.train.npos_synthesis` and :mod:`oodbench.train.methods.npos`.
"""

from __future__ import annotations

import operator
from typing import Annotated

import torch
import torch.nn.functional as F

from oodbench.constraints import Check, Integer, NonNegative, Options, Positive
from oodbench.losses.base import Loss, SwitchEpoch, register
from oodbench.losses.logitnorm import LogitNorm

#: ``head_templates``: the official 18 templates, or the model's own
HEAD_TEMPLATES = ("npos", "model")


@register
class NPOS(Loss):
    """Non-parametric outlier synthesis: LogitNorm + w * BCE(phi(ID), phi(outliers)) (ICLR 2023)."""

    name = "npos"
    paper = "Tao et al., ICLR 2023, arXiv 2303.02966"
    method = "npos"
    unused_settings = {
        "trainable": "NPOS trains the vision blocks after frozen_blocks, ln_post, proj and phi "
                     "(choose them with loss_options frozen_blocks)",
    }
    switch_epochs = {"start_epoch": SwitchEpoch(
        what="the outlier loss (phi's BCE on the synthesised outliers)",
        before="LogitNorm alone",
        official="start_epoch 40 of 100 epochs on ImageNet-1k, 10 of 20 on ImageNet-100, "
                 "deeplearning-wisc/npos CLIP_based/OOD/train_npos_imagenet_*.sh")}

    # ``tau``: LogitNorm's t; ``weight``: the outlier loss's weight; per class a FIFO queue of
    # ``queue_size`` ID embeddings, its ``boundary`` points with the largest ``k``-th-NN
    # distance, ``samples`` Gaussian draws (std ``sigma``) around one of them, of which the
    # ``keep`` with the largest k-NN distance become outliers, from epoch ``start_epoch``
    # (0-based) on; the first ``frozen_blocks`` vision blocks stay frozen; phi has
    # ``mlp_hidden`` hidden units and ``mlp_lr_ratio`` times the learning rate;
    # ``head_templates``: the prompt templates of the zero-shot head trained against, "npos"
    # (the official 18, ``oodbench.models.clip.NPOS_TEMPLATES``; the model's head is rebuilt
    # with them) or "model" (the model's own templates).
    tau: Positive = 8.0
    weight: NonNegative = 0.1
    queue_size: Annotated[int, Integer(min=1)] = 1000
    boundary: Annotated[int, Integer(min=1)] = 300
    k: Annotated[int, Integer(min=1)] = 400
    samples: Annotated[int, Integer(min=1)] = 1500
    sigma: Positive = 0.1
    keep: Annotated[int, Integer(min=1)] = 2
    start_epoch: Annotated[int, Integer(min=0, note="0-based")] = 40
    frozen_blocks: Annotated[int, Integer(min=0)] = 10
    mlp_hidden: Annotated[int, Integer(min=1)] = 32
    mlp_lr_ratio: Positive = 0.1
    head_templates: Annotated[str, Options(*HEAD_TEMPLATES)] = "npos"

    checks = (
        Check(("k", "queue_size"), operator.le,
              "k <= queue_size (the k-th neighbour in a queue of queue_size embeddings per class)"),
        Check(("boundary", "queue_size"), operator.le, "boundary <= queue_size"),
        Check(("keep", "samples"), operator.le, "keep <= samples"),
    )

    def _setup(self) -> None:
        self.logitnorm = LogitNorm(tau=self.tau)

    def head_outputs(self, num_classes: int) -> int:
        return num_classes + 1

    def classes_for_width(self, width: int) -> int:
        return width - 1

    def _loss(self, logits, labels, outlier_logits):  # type: ignore[no-untyped-def]
        value = self.logitnorm(logits[:, :-1], labels)
        if outlier_logits is None or not len(outlier_logits):
            return value
        scores = torch.cat([logits[:, -1], outlier_logits[:, -1]])
        targets = torch.cat([scores.new_ones(len(logits)), scores.new_zeros(len(outlier_logits))])
        return value + self.weight * F.binary_cross_entropy_with_logits(scores, targets)
