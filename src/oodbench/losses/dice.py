"""Dice loss on class probabilities: the segmentation loss used as a classification baseline.

Milletari, Navab & Ahmadi, "V-Net", 3DV 2016 (arXiv 1606.04797) introduced the soft Dice loss;
Spratling & Schütt (arXiv 2501.12191) train classifiers with it as a baseline ("DICE"). For a
classification batch the samples play the role of the pixels: with p = softmax(z) and one-hot
targets t, per class c

    D_c = 2 sum_i p_ic t_ic / max(sum_i p_ic + sum_i t_ic, eps)
    L = 1 - (1 / |P|) sum_{c in P} D_c,     P = the classes present in the batch

the multi-class soft Dice of segmentation libraries (e.g. segmentation_models_pytorch's
``DiceLoss(mode="multiclass")``, smooth = 0, eps = 1e-7), here averaged over the classes that
occur in the batch. How the HEM paper applied Dice to classification batches is not stated in
what could be consulted when this was written; this is the plain per-batch form.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from oodbench.losses.base import Loss, register

EPS = 1e-7


@register
class Dice(Loss):
    """Soft Dice between softmax probabilities and one-hot labels, over the batch."""

    name = "dice"
    paper = "Milletari et al., 3DV 2016, arXiv 1606.04797; baseline of arXiv 2501.12191"

    def _loss(self, logits, labels, outlier_logits):  # type: ignore[no-untyped-def]
        probs = torch.softmax(logits, dim=1)
        onehot = F.one_hot(labels, logits.shape[1]).to(probs.dtype)
        intersection = (probs * onehot).sum(dim=0)
        cardinality = probs.sum(dim=0) + onehot.sum(dim=0)
        dice = 2.0 * intersection / cardinality.clamp(min=EPS)
        present = onehot.sum(dim=0) > 0
        return 1.0 - dice[present].mean()
