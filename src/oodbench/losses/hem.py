"""HEM: the high error margin loss.

Spratling & Schütt, "A margin-based replacement for cross-entropy loss" (arXiv 2501.12191,
2025). A multi-class margin loss that averages only the *large* margin violations of each
sample, so that a sample with one bad competitor is pushed as hard as one with many, and a
sample already separated by the margin stops contributing:

    e_ij = max(0, mu - (z_{i,y_i} - z_ij))   for j != y_i,     e_{i,y_i} = 0
    ebar_i = (1 / C) sum_j e_ij                                 (mean over all C outputs)
    l_i = mean { e_ij : e_ij >= ebar_i }                        (0 when every e_ij is 0)
    L = sum_i l_i / #{ i : l_i > 0 }                            (0 when no sample has an error)

Hyper-parameter: the margin ``mu = 1`` for balanced training data (the paper's HEM; its HEM+
variant for imbalanced data scales the margin per class and is not implemented here). The
selection ``e_ij >= ebar_i`` is a mask (no gradient flows through the threshold), and the batch
mean is taken over the samples that still have an error.

Provenance: this follows the authors' reference implementation (codeberg.org/mwspratling/
HEMLoss, ``hem_loss``) as reproduced, with a test of equality against it, by an independent
re-implementation; the paper's text itself could not be consulted when this was written, so
check the margin and the batch reduction against its equations before quoting exact numbers.
"""

from __future__ import annotations

import torch

from oodbench.constraints import Positive
from oodbench.losses.base import Loss, register


def margin_errors(logits: torch.Tensor, labels: torch.Tensor, margin: float) -> torch.Tensor:
    """``e_ij = max(0, margin - z_iy + z_ij)`` for j != y_i and 0 at the label: (N, C)."""
    target = logits.gather(1, labels[:, None])
    errors = torch.relu(logits - target + margin)
    return errors.scatter(1, labels[:, None], 0.0)


@register
class HighErrorMargin(Loss):
    """Mean of each sample's above-average margin violations (Spratling & Schütt 2025)."""

    name = "hem"
    paper = "Spratling & Schütt, arXiv 2501.12191 (2025)"

    margin: Positive = 1.0

    def _loss(self, logits, labels, outlier_logits):  # type: ignore[no-untyped-def]
        errors = margin_errors(logits, labels, self.margin)
        high = (errors >= errors.mean(dim=1, keepdim=True)).detach() & (errors > 0).detach()
        count = high.sum(dim=1)
        per_sample = (errors * high).sum(dim=1) / count.clamp(min=1)
        active = int((count > 0).sum())
        return per_sample.sum() / max(active, 1)
