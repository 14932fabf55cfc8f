"""DOE (Diversified Outlier Exposure): Outlier Exposure at an implicitly transformed model.

Wang, Ye, Liu, Dai, Kalander, Liu, Hao & Han, "Out-of-distribution Detection with Implicit
Outlier Transformation", ICLR 2023 (arXiv 2303.05033; authors as in the official README's
citation and the ICLR paper; checked against QizhouWang/DOE ``doe_final.py`` and
``utils/utils_awp.py``).

Training starts from a trained classifier, with an outlier source. For the first
``warmup = 5`` epochs each step minimises ``CE(z_in, y) + L_OE(z_out)`` (``L_OE`` the
cross-entropy to uniform, ``logsumexp z - mean_c z_c``, weight 1). After that, each step:

1. **perturbation**: ``g = d L_sur(s z_out) / d s`` at ``s = 1`` with ``L_sur = -L_OE``
   (``g = mean_out(mean_c z_c - sum_c p_c z_c)``); the direction is one step of size 1 down
   ``g^2``, ``D_W = -d g^2 / d W``, for every weight matrix W (parameters of 2 or more
   dimensions whose name contains "weight", as the official ``diff_in_weights``: not a ViT's
   ``pos_embed`` or ``cls_token``), computed with dropout off (the official proxy model has
   ``dropRate=0``), rescaled to W's norm: ``P_W = ||W|| / (||D_W|| + 1e-20) * D_W``; averaged over
   steps, ``P <- 0.6 P + 0.4 P_new`` (the first step takes ``P_new``);
2. **OE step at theta + gamma P**, gamma drawn uniformly from {1e-1, 1e-2, 1e-3, 1e-4}: the
   gradient of ``L_OE`` there (clipped to norm 1), then theta is restored *exactly* (copied back)
   and the optimiser applies that gradient;
3. **CE step** at theta: ``CE(z_in, y)`` (clipped to norm 1).

ID and outlier images go through the network as one batch (BatchNorm sees both) as in the
code. Under DDP each rank computes ``g`` on its own slice of the outliers and the gradients of
``g^2`` are averaged, so P is the same on every rank (and gamma is drawn from the run's seed,
epoch and step) but is not the single-process P of the global batch. The official code takes the OE step at the perturbed weights and then subtracts
``gamma P``, which equals this up to rounding and the weight-decay term (here on theta, there on
theta + gamma P); its gradient clipping before the perturbation step clips the network's (empty)
gradients, so the direction is unclipped, as here. Official schedule (CIFAR): 10 epochs
(9 run), lr 0.01 with cosine decay, batch 128 ID + 256 outliers, SGD momentum 0.9 (Nesterov),
weight decay 5e-4.

Score at test time: the paper reports MSP; the official script scores with the maximum logit
(``maxlogit``). The leaderboard's DOE row (ImageNet-1k vs SUN, AUROC 76.26 / FPR95 80.94) is
the paper's ImageNet setting.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated

import torch.nn.functional as F

from oodbench.constraints import Integer, Interval, ListOf, Positive
from oodbench.losses.base import Loss, SwitchEpoch, register
from oodbench.losses.oe import uniform_cross_entropy

#: gamma, the perturbation's scale, drawn per step from these (the official code)
GAMMAS = (1e-1, 1e-2, 1e-3, 1e-4)


@register
class DOE(Loss):
    """OE at a worst-case perturbed model (implicit outlier transformation) plus CE at theta."""

    name = "doe"
    paper = "Wang et al., ICLR 2023, arXiv 2303.05033"
    needs_outliers = True
    method = "doe"
    switch_epochs = {"warmup": SwitchEpoch(
        what="DOE's perturbed step", before="plain Outlier Exposure, CE + OE",
        official="warmup 5 of 10 epochs, QizhouWang/DOE doe_final.py lines 25 and 46")}

    warmup: Annotated[int, Integer(min=0, note="epochs of CE + OE")] = 5
    gammas: Annotated[Sequence[float], ListOf(Interval(0, None, "neither"),
                                              note="the perturbation's scales")] = GAMMAS
    average: Annotated[float, Interval(0, 1, "left", note="the EMA factor")] = 0.6
    clip_norm: Positive = 1.0

    def _setup(self) -> None:
        self.gammas = [float(g) for g in self.gammas]

    def _loss(self, logits, labels, outlier_logits):  # type: ignore[no-untyped-def]
        """The warm-up objective ``CE + L_OE`` (the loop's DOE step uses the parts)."""
        return F.cross_entropy(logits, labels) + uniform_cross_entropy(outlier_logits).mean()
