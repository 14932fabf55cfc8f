"""retrain="last_block": block inputs cached once, the suffix run from them equals the whole
network on the images, only the last block and the head change, and variants are cached."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import oodbench
from oodbench.train.parts import trainable_modules
from oodbench.tuning.last_block import LastBlockVariant, block_inputs
from oodbench.tuning.protocols.held_out import through, without_classes
from tests.tuning.test_held_out import digits  # noqa: F401 - the shared fixture

LAST = {"epochs": 2, "batch_size": 32, "lr": 0.05}


def test_block_inputs_are_the_hooked_inputs_and_cached(digits, tmp_path, monkeypatch):  # noqa: F811
    model, fit, _ = digits
    monkeypatch.setenv("OODBENCH_CACHE", str(tmp_path))
    inputs = block_inputs(model, fit)
    first = trainable_modules(model, "last_block")[0]
    seen = []
    handle = first.register_forward_pre_hook(lambda m, a: seen.append(a[0].detach().clone()) and None)
    try:
        image = torch.stack([model.transform(fit.source.parent.load(int(i)))
                             for i in fit.source.indices[:5]])
        with torch.no_grad():
            model.eval()
            model.features(image)
    finally:
        handle.remove()
    # float32 passes of one network in batches of other sizes: ~1e-7 of activations of size ~1
    np.testing.assert_allclose(inputs[:5], seen[0].numpy(), rtol=1e-6, atol=1e-6)
    assert len(inputs) == len(fit) and len(list((tmp_path / "tune" / "last_block").rglob("*.npy"))) == 1
    np.testing.assert_array_equal(block_inputs(model, fit), inputs)  # from the cache


def test_variant_from_cached_inputs_equals_the_network_on_the_images(digits, tmp_path, monkeypatch):  # noqa: F811
    model, fit, val = digits
    monkeypatch.setenv("OODBENCH_CACHE", str(tmp_path))
    kept = np.array([0, 2, 3, 5, 7, 8, 9])
    rows = np.flatnonzero(np.isin(fit.labels, kept))
    inputs = block_inputs(model, fit)
    labels = np.searchsorted(kept, fit.labels[rows])
    variant = LastBlockVariant(model, kept, inputs[rows], labels, LAST, seed=3)
    assert not variant.from_cache
    out = variant.apply(val, block_inputs(model, val))
    direct = through(variant.net, kept, val)  # the whole network on the images
    # the last block and head run from cached float32 inputs or through the whole float32
    # network: rounding of ~1e-6 relative, inside 1e-4
    np.testing.assert_allclose(out.features, direct.features, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(out.logits, direct.logits, rtol=1e-4, atol=1e-5)
    assert out.head_weight.shape[0] == kept.size
    trained = {id(p) for m in trainable_modules(variant.net, "last_block") for p in m.parameters()}
    start = without_classes(model, kept)
    changed = [name for (name, p), q in zip(variant.net.named_parameters(), start.parameters())
               if not torch.equal(p, q)]
    assert changed and all(id(dict(variant.net.named_parameters())[n]) in trained for n in changed)
    again = LastBlockVariant(model, kept, inputs[rows], labels, LAST, seed=3)
    assert again.from_cache
    # the cached variant's weights through the same code in this process: the same bits
    np.testing.assert_array_equal(again.apply(val, block_inputs(model, val)).logits, out.logits)


def test_protocol_with_last_block_variants(digits, tmp_path, monkeypatch):  # noqa: F811
    model, fit, val = digits
    monkeypatch.setenv("OODBENCH_CACHE", str(tmp_path))
    held_out = {"m_grid": [3], "n_variants": 2, "n_tuning_sets": 2, "retrain": "last_block",
                "train": LAST}
    run = lambda: oodbench.tune("react", {"percentile": [80.0, 95.0]}, val, None, fit=fit,  # noqa: E731
                                model=model, protocol="held_out_paper", held_out=held_out)
    first = run()
    assert first.provenance["retrain"] == "last_block" and first.provenance["m_star"] == 3
    calls = []
    monkeypatch.setattr(LastBlockVariant, "_train", lambda *a: calls.append(1))
    second = run()
    assert calls == [] and second.table["auroc"].tolist() == first.table["auroc"].tolist()
    with pytest.raises(oodbench.errors.InvalidInputError, match="unknown train option.*last_block"):
        oodbench.tune("react", {"percentile": [90.0]}, val, None, fit=fit, model=model,
                      protocol="held_out_paper", held_out={**held_out, "train": {"epoch": 1}})


def _last_block_run(model, fit, val, seed):
    held_out = {"m_grid": [2, 3], "n_variants": 1, "n_tuning_sets": 2, "retrain": "last_block",
                "seed": seed, "train": {**LAST, "epochs": 1}}
    return oodbench.tune("react", {"percentile": [60.0, 80.0, 95.0]}, val, None, fit=fit,
                         model=model, protocol="held_out_paper", held_out=held_out, seed=seed)


def test_same_seed_same_phi_and_m_star_with_variants_trained_afresh(digits, tmp_path, monkeypatch):  # noqa: F811
    """Two runs with the same seed, each training its variants into an empty cache, give the
    same table, phi and M*; another seed withholds other classes (other values). The GP
    search's own seeding is tested in tests/tuning/test_paper_protocol.py."""
    model, fit, val = digits
    runs = []
    for cache in ("a", "b"):
        monkeypatch.setenv("OODBENCH_CACHE", str(tmp_path / cache))
        runs.append(_last_block_run(model, fit, val, 0))
        assert len(list((tmp_path / cache / "tune" / "last_block" / "nets").glob("*.pt"))) == 2
    other = _last_block_run(model, fit, val, 1)
    a, b = runs
    assert a.provenance["retrain"] == "last_block"
    assert a.best_params == b.best_params and a.provenance["m_star"] == b.provenance["m_star"]
    assert a.provenance["per_m"] == b.provenance["per_m"]
    cols = ["M", "percentile", "auroc"]
    assert a.table[cols].equals(b.table[cols])
    assert not np.allclose(a.table["auroc"], other.table["auroc"])


@pytest.mark.parametrize(("space", "settings", "message"), [
    ({"percentile": [90.0]}, {"m_grid": [2, 10]}, r"M=10, but M must be an integer in \[1, 8\]"),
    ({"percentile": [90.0]}, {"m_grid": [0]}, r"m_grid must be a non-empty list, each an integer >= 1"),
    ({"percentile": [90.0]}, {"n_tuning_sets": 0}, r"n_tuning_sets must be an integer >= 1 \(S, "),
    ({"tau": [1.0]}, {}, "detector 'react' has no hyper-parameter tau"),
    ({"percentile": oodbench.tuning.Range(50.0, 101.0)}, {}, r"bound 101.0 is outside"),
])
def test_bad_input_fails_before_the_block_pass(digits, monkeypatch, space, settings, message):  # noqa: F811
    """retrain="last_block": the errors come before the image pass for the block inputs and
    before any variant is trained."""
    import oodbench.tuning.last_block as last_block

    model, fit, val = digits
    monkeypatch.setattr(last_block, "block_inputs", lambda *a, **k: pytest.fail("image pass first"))
    monkeypatch.setattr(LastBlockVariant, "_train", lambda *a: pytest.fail("trained first"))
    held_out = {"m_grid": [3], "n_variants": 2, "n_tuning_sets": 2, "retrain": "last_block",
                "train": LAST, **settings}
    search = "gp" if any(isinstance(v, oodbench.tuning.Range) for v in space.values()) else "grid"
    with pytest.raises(oodbench.errors.InvalidInputError, match=message) as err:
        oodbench.tune("react", space, val, None, fit=fit, model=model, protocol="held_out_paper",
                      held_out=held_out, search=search, n_trials=3)
    assert "\n" not in str(err.value)
