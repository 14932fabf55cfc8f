"""MOS: the minimum "others" score of a group-softmax head.

Huang & Li, "MOS: Towards Scaling Out-of-distribution Detection for Large Semantic Space",
CVPR 2021 (arXiv 2105.01879). The classes are split into K groups, each with an extra "others"
output and its own softmax (trained with the ``mos`` loss of :mod:`oodbench.losses.mos`). An ID
image belongs to one group, so in that group "others" is unlikely; an OOD image looks like
"others" everywhere:

    kappa(x) = -min_k p^k_others(x)          (the paper's S_MOS; higher = more in-distribution)

The logits must come from a group-softmax head laid out as :class:`~oodbench.losses.mos.
GroupLayout` (C + K outputs). ``groups`` is read from the hyper-parameter or, when None, from
``acts.meta["mos_groups"]`` (set by :meth:`oodbench.train.HeadResult.apply` for a MOS head).
The detector needs such a head, so ``"all"`` in an experiment leaves it out; name it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

import numpy as np

from oodbench.constraints import Validated
from oodbench.detectors._math import as_tensor
from oodbench.detectors.base import Detector, register
from oodbench.errors import InvalidInputError
from oodbench.extract.activations import Activations
from oodbench.losses.mos import GroupLayout


@register
@dataclass
class MOS(Detector):
    """Minimum over class groups of the 'others' probability, negated (group softmax head)."""

    name = "mos"
    requires = frozenset({"logits", "groups"})
    paper = "Huang & Li, CVPR 2021, arXiv 2105.01879"

    groups: Annotated[list[list[int]] | None, Validated(
        "lists of class indices, one per group (None: the head's own)")] = None

    def _score(self, acts: Activations) -> np.ndarray:
        groups = self.groups if self.groups is not None else acts.meta.get("mos_groups")
        if groups is None:
            raise InvalidInputError(
                "detector 'mos' needs the class groups of a group-softmax head: "
                "create('mos', groups=[[...], ...]) or activations from HeadResult.apply of a "
                "head trained with loss='mos'"
            )
        others = GroupLayout(groups).others_probabilities(as_tensor(acts.logits))
        return -others.min(dim=1).values.numpy()
