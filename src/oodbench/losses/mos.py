"""MOS: the group softmax of "MOS: Towards Scaling Out-of-distribution Detection for Large
Semantic Space", Huang & Li, CVPR 2021 (arXiv 2105.01879).

The C classes are split into K disjoint groups G_1..G_K; each group gets one extra output,
"others", and its own softmax over its |G_k| + 1 outputs. For a sample of class y, the target in
group k is y when y is in G_k and "others" otherwise, so the loss is the sum of K
cross-entropies (the paper's Eq. 2):

    L = -(1 / N) sum_i sum_k log p^k_{t_ik}(x_i),   t_ik = y_i if y_i in G_k else others_k

The head has C + K outputs, laid out group by group: ``[others_1, G_1..., others_2, G_2...]``
(:class:`GroupLayout`). At test time the predicted class is the one with the largest
within-group probability, and the OOD score is the ``mos`` detector's
``-min_k p^k_others(x)`` (higher = more in-distribution). The paper's best ImageNet grouping
follows the WordNet taxonomy (8 groups); :func:`oodbench.data.class_groups.hierarchy_groups`
builds one, or give the groups yourself.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated

import numpy as np
import torch
import torch.nn.functional as F

from oodbench.constraints import Check, Validated
from oodbench.errors import ClassCountMismatchError, InvalidInputError
from oodbench.losses.base import Loss, register


class GroupLayout:
    """Where each group's "others" output and classes sit in a head of width C + K.

    Args:
        groups: K disjoint lists of class indices that together cover ``0 .. C - 1``.
    """

    def __init__(self, groups: Sequence[Sequence[int]]):
        lists = [[int(c) for c in g] for g in groups]
        if len(lists) < 1 or any(len(g) == 0 for g in lists):
            raise InvalidInputError("MOS groups must be a non-empty list of non-empty class lists")
        flat = sorted(c for g in lists for c in g)
        if flat != list(range(len(flat))):
            dup = sorted({c for c in flat if flat.count(c) > 1})
            raise InvalidInputError(
                "MOS groups must split the classes 0..C-1 into disjoint groups"
                + (f"; classes {dup[:10]} are in several groups" if dup else
                   f"; they cover {len(set(flat))} distinct classes between {flat[0]} and {flat[-1]}")
            )
        self.groups = lists
        self.num_classes = len(flat)
        self.n_groups = len(lists)
        self.width = self.num_classes + self.n_groups
        starts = np.cumsum([0] + [len(g) + 1 for g in lists])
        self.blocks = [slice(int(s), int(s) + len(g) + 1) for s, g in zip(starts, lists)]
        # column of every class in the head, and (group, position inside the block) per class
        self.class_column = np.empty(self.num_classes, dtype=np.int64)
        self.class_group = np.empty(self.num_classes, dtype=np.int64)
        self.class_position = np.empty(self.num_classes, dtype=np.int64)
        for k, (block, g) in enumerate(zip(self.blocks, lists)):
            for pos, c in enumerate(g, start=1):
                self.class_column[c], self.class_group[c], self.class_position[c] = (
                    block.start + pos, k, pos)

    def check_width(self, width: int) -> None:
        if width != self.width:
            raise ClassCountMismatchError(
                f"MOS with {self.n_groups} groups over {self.num_classes} classes needs a head of "
                f"{self.width} outputs (classes + one 'others' per group); the logits have {width}"
            )

    def group_targets(self, labels: torch.Tensor) -> torch.Tensor:
        """(N, K): the position of the label inside each group's block (0 = others)."""
        group = torch.as_tensor(self.class_group, device=labels.device)[labels]
        position = torch.as_tensor(self.class_position, device=labels.device)[labels]
        k = torch.arange(self.n_groups, device=labels.device)
        return torch.where(group[:, None] == k[None, :], position[:, None], 0)

    def group_log_softmax(self, logits: torch.Tensor) -> list[torch.Tensor]:
        """One (N, |G_k| + 1) log-softmax per group (column 0 = others)."""
        self.check_width(int(logits.shape[1]))
        return [torch.log_softmax(logits[:, block], dim=1) for block in self.blocks]

    def others_probabilities(self, logits: torch.Tensor) -> torch.Tensor:
        """(N, K): p^k_others for every group."""
        return torch.stack([lp[:, 0] for lp in self.group_log_softmax(logits)], dim=1).exp()

    def class_probabilities(self, logits: torch.Tensor) -> torch.Tensor:
        """(N, C): each class's probability inside its own group (argmax = MOS prediction)."""
        log_probs = torch.cat([lp[:, 1:] for lp in self.group_log_softmax(logits)], dim=1)
        order = np.concatenate(self.groups)
        out = torch.empty_like(log_probs)
        out[:, torch.as_tensor(order, device=logits.device)] = log_probs
        return out.exp()


@register
class GroupSoftmax(Loss):
    """MOS group-softmax loss: one softmax per class group with an extra 'others' output."""

    name = "mos"
    paper = "Huang & Li, CVPR 2021, arXiv 2105.01879"

    groups: Annotated[Sequence[Sequence[int]] | None, Validated(
        "disjoint lists of class indices that together cover 0 .. C - 1",
        validator=GroupLayout)] = None

    checks = (Check(("groups",), lambda groups: groups is not None,
                    "the class groups given (loss_options={'groups': [[0, 1, ...], ...]}, e.g. "
                    "from oodbench.data.class_groups.hierarchy_groups(wnids, n_groups=8))"),)

    def _setup(self) -> None:
        assert self.groups is not None  # (checked)
        self.layout = GroupLayout(self.groups)
        self.groups = self.layout.groups

    def head_outputs(self, num_classes: int) -> int:
        if num_classes != self.layout.num_classes:
            raise ClassCountMismatchError(
                f"loss 'mos': the groups cover {self.layout.num_classes} classes but the data has "
                f"{num_classes}"
            )
        return self.layout.width

    def classes_for_width(self, width: int) -> int:
        self.layout.check_width(width)
        return self.layout.num_classes

    def _loss(self, logits, labels, outlier_logits):  # type: ignore[no-untyped-def]
        targets = self.layout.group_targets(labels)
        parts = self.layout.group_log_softmax(logits)
        return sum(F.nll_loss(lp, targets[:, k], reduction="sum")
                   for k, lp in enumerate(parts)) / len(labels)
