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
documented in :mod:`oodbench.train.npos_synthesis` and :mod:`oodbench.train.npos`.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from oodbench.errors import InvalidInputError
from oodbench.losses.base import Loss, SwitchEpoch, register
from oodbench.losses.logitnorm import LogitNorm

#: ``head_templates``: the official 18 templates, or the model's own
HEAD_TEMPLATES = ("npos", "model")


@register
class NPOS(Loss):
    """Non-parametric outlier synthesis: LogitNorm + w * BCE(phi(ID), phi(outliers)) (ICLR 2023)."""

    name = "npos"
    paper = "Tao et al., ICLR 2023, arXiv 2303.02966"
    trainer = "npos"
    unused_settings = {
        "trainable": "NPOS trains the vision blocks after frozen_blocks, ln_post, proj and phi "
                     "(choose them with loss_options frozen_blocks)",
    }
    switch_epochs = {"start_epoch": SwitchEpoch(
        what="the outlier loss (phi's BCE on the synthesised outliers)",
        before="LogitNorm alone",
        official="start_epoch 40 of 100 epochs on ImageNet-1k, 10 of 20 on ImageNet-100, "
                 "deeplearning-wisc/npos CLIP_based/OOD/train_npos_imagenet_*.sh")}

    def __init__(
        self, tau: float = 8.0, weight: float = 0.1, queue_size: int = 1000, boundary: int = 300,
        k: int = 400, samples: int = 1500, sigma: float = 0.1, keep: int = 2,
        start_epoch: int = 40, frozen_blocks: int = 10, mlp_hidden: int = 32,
        mlp_lr_ratio: float = 0.1, head_templates: str = "npos",
    ):
        """``tau``: LogitNorm's t; ``weight``: the outlier loss's weight; per class a FIFO
        queue of ``queue_size`` ID embeddings, its ``boundary`` points with the largest
        ``k``-th-NN distance, ``samples`` Gaussian draws (std ``sigma``) around one of them, of
        which the ``keep`` with the largest k-NN distance become outliers, from epoch
        ``start_epoch`` (0-based) on; the first ``frozen_blocks`` vision blocks stay frozen;
        phi has ``mlp_hidden`` hidden units and ``mlp_lr_ratio`` times the learning rate;
        ``head_templates``: the prompt templates of the zero-shot head trained against,
        ``"npos"`` (the official 18, ``oodbench.models.clip.NPOS_TEMPLATES``; the model's head
        is rebuilt with them) or ``"model"`` (the model's own templates)."""
        super().__init__()
        if head_templates not in HEAD_TEMPLATES:
            raise InvalidInputError(
                f"npos: head_templates must be one of {HEAD_TEMPLATES}; got {head_templates!r}")
        self.head_templates = head_templates
        for key, value in (("queue_size", queue_size), ("boundary", boundary), ("k", k),
                           ("samples", samples), ("keep", keep), ("mlp_hidden", mlp_hidden)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InvalidInputError(f"npos: {key} must be a positive integer; got {value!r}")
        for key, value in (("start_epoch", start_epoch), ("frozen_blocks", frozen_blocks)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise InvalidInputError(f"npos: {key} must be an integer >= 0; got {value!r}")
        if k > queue_size:
            raise InvalidInputError(
                f"npos: k={k} is larger than the queue ({queue_size} embeddings per class): "
                "the k-th neighbour does not exist; use k <= queue_size")
        if boundary > queue_size:
            raise InvalidInputError(
                f"npos: boundary={boundary} is larger than the queue ({queue_size}); use "
                "boundary <= queue_size")
        if keep > samples:
            raise InvalidInputError(f"npos: keep={keep} is larger than samples={samples}")
        for key, positive in (("tau", tau), ("sigma", sigma), ("mlp_lr_ratio", mlp_lr_ratio)):
            if not positive > 0:
                raise InvalidInputError(f"npos: {key} must be > 0; got {positive!r}")
        if not weight >= 0:
            raise InvalidInputError(f"npos: weight must be >= 0; got {weight!r}")
        self.tau, self.weight, self.sigma = float(tau), float(weight), float(sigma)
        self.queue_size, self.boundary, self.k, self.samples, self.keep = (
            queue_size, boundary, k, samples, keep)
        self.start_epoch, self.frozen_blocks = start_epoch, frozen_blocks
        self.mlp_hidden, self.mlp_lr_ratio = mlp_hidden, float(mlp_lr_ratio)
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
