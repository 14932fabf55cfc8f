"""Training methods as registry entries (``oodbench.train.method_registry``): every loss finds
its method by name, and each entry's behaviour is what ``oodbench.train.train`` runs for it;
the entries are the files of ``oodbench/train/methods/``, found as detectors and losses are."""

from __future__ import annotations

import json
import os
import pkgutil
import subprocess
import sys
from dataclasses import replace

import numpy as np
import pytest

import oodbench.train.methods
from oodbench import losses
from oodbench.data.arrays import ArraySource
from oodbench.errors import UnknownNameError
from oodbench.losses.base import LOSSES
from oodbench.models.small_cnn import SmallCNN
from oodbench.train import train
from oodbench.train.hooks import LoopHooks
from oodbench.train.method_registry import METHODS, method_of
from tests.conftest import REPO
from tests.train._clip_run import model as clip_model
from tests.train._clip_run import toy_source
from tests.train._method_run import noise

#: options a loss cannot be built without
OPTIONS = {"mos": {"groups": [[0, 1], [2, 3]]}}


class _Ran(Exception):
    """Raised by a stand-in behaviour: ``train`` reached it (with this loss)."""


def _stand_in(method):  # type: ignore[no-untyped-def]
    """A behaviour of the same kind as ``method``'s that raises :class:`_Ran` when run."""
    if method.own_loop:
        def trainer(model, source, criterion, settings, **kwargs):  # type: ignore[no-untyped-def]
            raise _Ran(criterion.name)
        return trainer

    class Hooks(method.behaviour):  # type: ignore[misc, name-defined]
        def prepare(self, run):  # type: ignore[no-untyped-def]
            raise _Ran(self.criterion.name)
    return Hooks


@pytest.mark.parametrize("name", list(LOSSES))
def test_every_loss_names_a_registered_method_that_is_what_train_runs(name, tmp_path,
                                                                       monkeypatch) -> None:
    loss = losses.create(name, **OPTIONS.get(name, {}))
    cls = LOSSES[name]
    method = method_of(cls)
    behaviour = method.behaviour
    if method.own_loop:  # a loop of its own: train() hands the run to it
        assert callable(behaviour) and not isinstance(behaviour, type)
    else:  # hooks of the classifier loop
        assert isinstance(behaviour, type) and issubclass(behaviour, LoopHooks)
    assert name in method.losses
    # what train() runs is the registry's entry: a stand-in put there is what it reaches
    monkeypatch.setitem(METHODS, method.name, replace(method, behaviour=_stand_in(method)))
    if "clip" in method.needs:
        model, source, extra = clip_model(name), toy_source(), {}
    else:
        rng = np.random.default_rng(0)
        source = ArraySource(rng.integers(0, 256, size=(8, 8, 8), dtype=np.uint8),
                             np.arange(8) % 4, name="four")
        model = SmallCNN(loss.head_outputs(4), seed=0)
        extra = {"outliers": noise()} if loss.needs_outliers else {}
    with pytest.raises(_Ran, match=f"^{name}$"):
        train(model, source, out=tmp_path / "run", loss=name, loss_options=OPTIONS.get(name),
              device="cpu", num_workers=0, progress=False, **extra)


def test_every_method_is_used_by_some_loss() -> None:
    used = {method_of(cls).name for cls in LOSSES.values()}
    assert used == set(METHODS)


def test_the_methods_are_the_files_of_the_methods_folder() -> None:
    """One public module of ``oodbench/train/methods/`` per method, each registering the entry
    of its own name (found by scanning the folder, as detectors and losses are)."""
    files = {m.name for m in pkgutil.iter_modules(oodbench.train.methods.__path__)
             if not m.name.startswith("_")}
    assert files == set(METHODS)
    for name, method in METHODS.items():
        assert method.behaviour.__module__ in (f"oodbench.train.methods.{name}",
                                               "oodbench.train.hooks")  # classifier: the default


def test_a_methods_settings_are_the_options_of_its_losses() -> None:
    rows = {row["name"]: row for row in losses.available()}
    for method in METHODS.values():
        assert method.settings == tuple(f"{loss}.{option}" for loss in method.losses
                                        for option in rows[loss]["defaults"])
    assert "umap.keep" in METHODS["umap"].settings and METHODS["classifier"].needs == frozenset()


def test_listing_the_methods_loads_no_training_entry_point() -> None:
    """``oodbench list methods`` imports the method files (as ``list detectors`` imports the
    detectors) and what they use, never ``train()``, the head trainer, the recipe or the
    training config."""
    code = ("import json, sys\nfrom oodbench.cli.listing import registry, registry_frame\n"
            "registry_frame(registry('methods'))\n"
            "print(json.dumps(sorted(m for m in sys.modules if m.startswith('oodbench.train'))))")
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, env=env, cwd=REPO)
    loaded = set(json.loads(out.stdout))
    assert {f"oodbench.train.methods.{name}" for name in METHODS} <= loaded
    entry_points = {"finetune", "head", "recipe", "config", "optim", "method_defaults",
                    "method_settings"}
    assert not loaded & {f"oodbench.train.{name}" for name in entry_points}


def test_an_unknown_method_names_the_closest() -> None:
    with pytest.raises(UnknownNameError, match="umap"):
        METHODS.lookup("uamp")
