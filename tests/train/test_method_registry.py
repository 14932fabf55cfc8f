"""Training methods as registry entries (``oodbench.train.method_registry``): every loss finds
its method by name, and each entry's behaviour is what ``oodbench.train.train`` runs for it."""

from __future__ import annotations

import pytest

from oodbench import losses
from oodbench.errors import UnknownNameError
from oodbench.losses.base import LOSSES
from oodbench.train import finetune
from oodbench.train.hooks import LoopHooks
from oodbench.train.method_registry import METHODS, method_of


@pytest.mark.parametrize("name", list(LOSSES))
def test_every_loss_names_a_registered_method_that_is_what_train_runs(name: str) -> None:
    options = {"groups": [[0, 1], [2, 3]]} if name == "mos" else {}  # (mos needs its groups)
    loss = losses.create(name, **options)
    cls = LOSSES[name]
    method = method_of(cls)
    behaviour = method.load()
    if cls.trainer != "classifier":  # a loop of its own: train() hands the run to it
        assert finetune.METHOD_TRAINERS[cls.trainer] is behaviour
    else:  # hooks of the classifier loop: the ones train() builds for this loss
        assert isinstance(behaviour, type) and issubclass(behaviour, LoopHooks)
        assert type(finetune.hooks_for(loss)) is behaviour


def test_every_method_is_used_by_some_loss() -> None:
    used = {method_of(cls).name for cls in LOSSES.values()}
    assert used == set(METHODS)


def test_an_unknown_method_names_the_closest() -> None:
    with pytest.raises(UnknownNameError, match="umap"):
        METHODS.lookup("uamp")
