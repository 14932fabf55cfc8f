import pytest
import torch

from oodbench.errors import ClassCountMismatchError, InvalidInputError, UnknownNameError
from oodbench.losses import available, create


def test_registry_lists_every_loss_of_the_issue():
    names = {row["name"] for row in available()}
    assert names >= {"ce", "logitnorm", "hem", "mm", "dice", "oe", "mos"}
    assert all(row["paper"] for row in available())


def test_unknown_loss_names_the_closest():
    with pytest.raises(UnknownNameError, match="Did you mean 'hem'"):
        create("hemm")


def test_unknown_option():
    with pytest.raises(InvalidInputError, match="no option tau"):
        create("ce", tau=1)


@pytest.mark.parametrize("name", ["ce", "logitnorm", "hem", "mm", "dice"])
def test_label_outside_the_head(name):
    with pytest.raises(ClassCountMismatchError, match="label 3 lies outside the head's 3 classes"):
        create(name)(torch.zeros(2, 3), torch.tensor([0, 3]))


def test_hyperparams_read_back():
    assert create("hem", margin=0.5).hyperparams == {"margin": 0.5}
