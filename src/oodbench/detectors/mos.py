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
For the released MOS checkpoint (``bit:BiT-S-R101x1`` with 1008 outputs), ``groups`` may be the
path of the official data list that fixed its head (:func:`groups_from_list`).
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

    groups: Annotated[list[list[int]] | str | None, Validated(
        "lists of class indices, one per group, or the path of MOS's official group list "
        "(None: the head's own)")] = None

    def _score(self, acts: Activations) -> np.ndarray:
        groups = self.groups if self.groups is not None else acts.meta.get("mos_groups")
        if isinstance(groups, str):
            groups = groups_from_list(groups)
        if groups is None:
            raise InvalidInputError(
                "detector 'mos' needs the class groups of a group-softmax head: "
                "create('mos', groups=[[...], ...]) or activations from HeadResult.apply of a "
                "head trained with loss='mos'"
            )
        others = GroupLayout(groups).others_probabilities(as_tensor(acts.logits))
        return -others.min(dim=1).values.numpy()


def groups_from_list(path: str) -> list[list[int]]:
    """The class groups of MOS's released group-softmax head, from the official data list that
    fixed its layout (deeplearning-wisc/large_scale_ood data_lists/imagenet2012_group_softmax_
    {train,val}_list.txt: lines ``<split>/<wnid>/<file> <group> <index in group>``, read by
    dataset.py:62-70, 90-92; group k's block of the head is its "others" output, then its
    classes by index, finetune.py:128-134). Group k lists its classes (indices of the sorted
    ImageNet-1k wnids, the order of an ImageFolder) by their index in the group."""
    from pathlib import Path

    from oodbench.data.imagenet import imagenet1k_wnids

    where = f"mos: group list {path!r}"
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except OSError as err:
        raise InvalidInputError(f"{where} cannot be read ({err})") from err
    index = {w: i for i, w in enumerate(imagenet1k_wnids())}
    slots: dict[tuple[int, int], int] = {}
    for number, line in enumerate(lines, start=1):
        parts = line.split()
        if not parts:
            continue
        try:
            wnid, group, position = Path(parts[0]).parent.name, int(parts[-2]), int(parts[-1])
        except (IndexError, ValueError):
            raise InvalidInputError(f"{where}, line {number}: expected '<split>/<wnid>/<file> "
                                    f"<group> <index in group>', got {line!r}") from None
        if wnid not in index:
            raise InvalidInputError(f"{where}, line {number}: {wnid!r} is no ImageNet-1k wnid")
        if slots.setdefault((group, position), index[wnid]) != index[wnid]:
            raise InvalidInputError(f"{where}, line {number}: group {group} index {position} "
                                    "holds two classes")
    n_groups = 1 + max((g for g, _ in slots), default=-1)
    groups = [[slots[k] for k in sorted(k for k in slots if k[0] == g)] for g in range(n_groups)]
    contiguous = all(sorted(i for h, i in slots if h == g) == list(range(len(groups[g])))
                     for g in range(n_groups))
    if not contiguous or sorted(c for g in groups for c in g) != list(range(len(index))):
        raise InvalidInputError(f"{where} does not place each of the {len(index)} ImageNet-1k "
                                "classes once, at indices 0, 1, ... of its group")
    return groups
