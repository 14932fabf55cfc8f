"""retrain="scratch": variants re-initialised and trained on the kept classes only, cached per
(split, seed), the same seed choosing the same phi and M*, one-line errors before training.

Tiny 32 px images (4 classes, 12 training images each) and the ``cpu-small`` recipe cut to
one epoch of 16-image batches: seconds on a CPU.
(The ``tiny`` fixture: ``tests/tuning/conftest.py``.)
"""

from __future__ import annotations

import os

import numpy as np
import pytest

import oodbench
import oodbench.train.recipe as recipe_module
from oodbench.errors import InvalidInputError
from oodbench.tuning import Range
from oodbench.tuning.protocols.held_out import HeldOutClasses, VariantFactory

SCRATCH = {"recipe": "cpu-small", "epochs": 1, "batch_size": 16}


def test_a_scratch_variant_never_trains_on_a_withheld_class(tiny, monkeypatch, tmp_path):
    """The images handed to the trainer are exactly the kept classes' fit images: no pixel
    array of a withheld class's image, labels only of kept classes, fresh weights (the
    recipe's factory, not the given model's)."""
    model, fit, id_val, train_src = tiny
    monkeypatch.setenv("OODBENCH_CACHE", str(tmp_path))
    seen = []
    real = recipe_module.train_recipe

    def spy(recipe, data, **kw):
        seen.append(data)
        return real(recipe, data, **kw)

    monkeypatch.setattr(recipe_module, "train_recipe", spy)
    factory = VariantFactory(fit, id_val, HeldOutClasses(
        n_variants=2, held_out_fraction=0.5, retrain="scratch", train=SCRATCH), model)
    variants = factory.variants_m(2)
    assert len(seen) == 2
    pixels, labels = train_src.images, np.asarray(train_src.labels)
    for variant, data in zip(variants, seen):
        withheld_images = {pixels[i].tobytes() for i in np.flatnonzero(np.isin(labels, variant.withheld))}
        trained = data.images.permute(0, 2, 3, 1).contiguous().numpy()
        assert not {image.tobytes() for image in trained} & withheld_images
        assert len(trained) == int(np.isin(labels, variant.kept).sum())  # every kept image, once
        assert set(data.labels.tolist()) == set(range(variant.kept.size))  # re-indexed kept
        record = factory.trained_on[(variant.index, 2)]
        assert not np.isin(np.asarray(fit.labels)[record.rows], variant.withheld).any()
        assert variant.fit.head_weight.shape[0] == variant.kept.size  # its own head
        assert not variant.from_cache


def test_scratch_variants_are_cached_and_resume(tiny, monkeypatch, tmp_path):
    """A second factory on the same cache trains nothing; a killed run (a checkpoint of epoch
    1 of 2) continues from it instead of starting again."""
    model, fit, id_val, _ = tiny
    monkeypatch.setenv("OODBENCH_CACHE", str(tmp_path))
    config = HeldOutClasses(n_variants=1, held_out_fraction=0.25, retrain="scratch",
                            train={**SCRATCH, "epochs": 2})
    calls = []
    real = recipe_module._epoch

    def counting(*args, **kw):
        calls.append(args[-1])
        if len(calls) == 2 and not hasattr(counting, "killed"):
            counting.killed = True
            raise KeyboardInterrupt  # "killed" during epoch 2
        return real(*args, **kw)

    monkeypatch.setattr(recipe_module, "_epoch", counting)
    with pytest.raises(KeyboardInterrupt):
        VariantFactory(fit, id_val, config, model).variants_m(1)
    assert calls == [0, 1]
    first = VariantFactory(fit, id_val, config, model).variants_m(1)[0]
    assert calls == [0, 1, 1]  # resumed at epoch 2 (index 1), epoch 1 not redone
    again = VariantFactory(fit, id_val, config, model).variants_m(1)[0]
    assert calls == [0, 1, 1] and again.from_cache and not first.from_cache
    np.testing.assert_array_equal(again.id_val.logits, first.id_val.logits)


def _tuned(fit, id_val, model, seed):
    return oodbench.tune("react", {"percentile": Range(50.0, 99.0)}, id_val, None, fit=fit,
                         model=model, protocol="held_out_paper", search="tpe", n_trials=3,
                         seed=seed, held_out={"m_grid": [1, 2], "n_variants": 2,
                                              "n_tuning_sets": 2, "retrain": "scratch",
                                              "seed": seed, "train": SCRATCH})


def test_same_seed_same_choice_with_variants_trained_afresh(tiny, monkeypatch, tmp_path):
    """Two runs, each into its own empty cache (every variant trained again), choose the same
    phi and M* and report the same l_hat: the training and the draws are seeded."""
    model, fit, id_val, _ = tiny
    results = []
    for run in ("a", "b"):
        cache = tmp_path / run
        monkeypatch.setenv("OODBENCH_CACHE", str(cache))
        results.append(_tuned(fit, id_val, model, seed=3))
        assert len(list((cache / "tune" / "held_out" / "scratch").iterdir())) == 4  # 2 M x N=2
    a, b = results
    assert a.best_params == b.best_params
    assert a.provenance["m_star"] == b.provenance["m_star"]
    assert a.best_value == b.best_value


@pytest.mark.parametrize("train, message", [
    ({"recipe": "cpu-smal"}, "unknown recipe 'cpu-smal'"),
    ({"recipe": "cpu-small", "trainable": "all"}, "unknown train option 'trainable'"),
    ({"recip": "cpu-small"}, "unknown train option 'recip'"),
])
def test_bad_scratch_options_fail_before_training(tiny, monkeypatch, tmp_path, train, message):
    model, fit, id_val, _ = tiny
    monkeypatch.setenv("OODBENCH_CACHE", str(tmp_path))
    monkeypatch.setattr(recipe_module, "train_recipe", lambda *a, **k: pytest.fail("trained"))
    with pytest.raises(InvalidInputError, match=message) as err:
        oodbench.tune("react", {"percentile": [90.0]}, id_val, None, fit=fit, model=model,
                      protocol="held_out_paper", held_out={"m_grid": [1], "n_variants": 1,
                                                           "retrain": "scratch", "train": train})
    assert "\n" not in str(err.value)
    assert not (tmp_path / "tune").exists()


def test_general_path_needs_a_loadable_spec(tiny, monkeypatch, tmp_path):
    """Without a recipe the factory is oodbench.models.load(spec): a recipe network's spec is
    not loadable, which is said before anything trains."""
    model, fit, id_val, _ = tiny
    monkeypatch.setenv("OODBENCH_CACHE", str(tmp_path))
    with pytest.raises(InvalidInputError, match="not loadable"):
        VariantFactory(fit, id_val, HeldOutClasses(retrain="scratch", held_out_fraction=0.25,
                                                   train={"epochs": 1}), model)
    assert os.listdir(tmp_path) == [] or not (tmp_path / "tune").exists()
