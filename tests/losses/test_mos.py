import numpy as np
import pytest
import torch

from oodbench.errors import ClassCountMismatchError, InvalidInputError
from oodbench.losses import create
from oodbench.losses.mos import GroupLayout
from tests.losses.conftest import log_softmax, run

GROUPS = [[0, 3, 5], [1, 6], [2, 4]]  # 7 classes in 3 groups -> 10 outputs


def mos_reference(logits, labels, groups):
    total = 0.0
    for z, y in zip(logits, labels):
        start = 0
        for g in groups:
            block = z[start : start + len(g) + 1][None, :]
            target = 1 + g.index(y) if y in g else 0
            total -= log_softmax(block)[0, target]
            start += len(g) + 1
    return total / len(labels)


def test_equals_the_sum_of_group_cross_entropies(batch):
    _, labels = batch
    rng = np.random.default_rng(3)
    scale = 1e4 if np.abs(batch[0]).max() > 100 else 3.0
    logits = rng.normal(scale=scale, size=(len(labels), 10))
    value, _ = run(create("mos", groups=GROUPS), logits, labels)
    np.testing.assert_allclose(value, mos_reference(logits, labels, GROUPS), rtol=1e-12)


def test_layout_columns_and_probabilities():
    layout = GroupLayout(GROUPS)
    assert layout.width == 10 and layout.n_groups == 3
    # block 0 = [others, 0, 3, 5], block 1 = [others, 1, 6], block 2 = [others, 2, 4]
    assert layout.class_column.tolist() == [1, 5, 8, 2, 9, 3, 6]
    z = torch.randn(4, 10, dtype=torch.float64)
    others = layout.others_probabilities(z)
    p0 = torch.softmax(z[:, 0:4], dim=1)
    np.testing.assert_allclose(others[:, 0], p0[:, 0])
    probs = layout.class_probabilities(z)
    np.testing.assert_allclose(probs[:, 3], p0[:, 2])  # class 3 is position 2 of block 0


def test_bad_groups_and_widths():
    with pytest.raises(InvalidInputError, match="disjoint"):
        GroupLayout([[0, 1], [1, 2]])
    with pytest.raises(InvalidInputError, match="groups"):
        create("mos")
    with pytest.raises(ClassCountMismatchError, match="10 outputs"):
        create("mos", groups=GROUPS)(torch.zeros(2, 7), torch.tensor([0, 1]))
    with pytest.raises(ClassCountMismatchError, match="outside"):
        create("mos", groups=GROUPS)(torch.zeros(2, 10), torch.tensor([0, 7]))
