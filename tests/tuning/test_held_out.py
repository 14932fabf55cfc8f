"""tune(protocol="held_out_classes"): the simulated ID/OOD variants, the aggregate over them,
determinism, the variant cache and the bad-input messages.

The references are recomputed in this process by the same detectors (or network) on the same
rows, so they equal the tuned values to the last bit here, and on any CPU, where both sides
change alike; tolerances of 1e-12 relative (1e-9 for means over variants) only leave room for
the summation order of averages.
"""

from __future__ import annotations

import numpy as np
import pytest

import oodbench
import oodbench.train
from oodbench import metrics
from oodbench.detectors import create
from oodbench.errors import InvalidInputError
from oodbench.train import optim, train_head
from oodbench.train.optim import FINETUNE, from_options
from oodbench.tuning import Range
from oodbench.tuning.protocols.held_out import HeldOutClasses, VariantFactory
from tests.detectors.conftest import make_activations

HEAD = {"epochs": 3, "lr": 0.05}
#: what the variants' heads train with: HEAD applied to train_head's preset
HEAD_OPTIM = from_options(HEAD, optim.HEAD)[0]


@pytest.fixture(scope="module")
def fit_val():
    return make_activations(600, 10, 32, seed=0), make_activations(300, 10, 32, seed=1)


def _reference(name, points, fit, id_val, *, n_variants, fraction, seed):
    """The protocol restated from its docstring: per variant, withhold round(f n) classes drawn
    with default_rng([seed, i, M]), train a head on the kept classes' fit rows, fit the detector
    on them, score id_val rows of kept classes (ID) against every other row (OOD). Returns the
    (mean, std) of the AUROC over the variants for each point."""
    classes = np.unique(fit.labels)
    m = int(round(fraction * classes.size))
    values = np.empty((len(points), n_variants))
    for i in range(n_variants):
        withheld = np.random.default_rng([seed, i, m]).choice(classes, size=m, replace=False)
        kept = np.setdiff1d(classes, withheld)
        head = train_head(fit, classes=kept, seed=seed * 1000 + i, optim=HEAD_OPTIM)
        in_fit = np.isin(fit.labels, kept)
        in_val = np.isin(id_val.labels, kept)
        sim_id = head.apply(id_val.subset(np.flatnonzero(in_val)))
        sim_ood = [head.apply(fit.subset(np.flatnonzero(~in_fit))),
                   head.apply(id_val.subset(np.flatnonzero(~in_val)))]
        for j, point in enumerate(points):
            det = create(name, **point).fit(head.apply(fit.subset(np.flatnonzero(in_fit))))
            ood_scores = np.concatenate([det.score(acts) for acts in sim_ood])
            values[j, i] = metrics.auroc(det.score(sim_id), ood_scores)
    return list(zip(values.mean(axis=1), values.std(axis=1)))


def _held_out(seed=0, **kw):
    return {"n_variants": 3, "held_out_fraction": 0.3, "seed": seed, "train": HEAD, **kw}


def test_matches_the_protocol_restated(fit_val):
    fit, id_val = fit_val
    grid = {"percentile": [70.0, 90.0, 99.0]}
    result = oodbench.tune("react", grid, id_val, None, fit=fit, protocol="held_out_classes",
                           held_out=_held_out())
    reference = _reference("react", [{"percentile": p} for p in grid["percentile"]], fit, id_val,
                           n_variants=3, fraction=0.3, seed=0)
    for (mean, std), (_, row) in zip(reference, result.table.iterrows()):
        assert row["auroc"] == pytest.approx(mean, rel=1e-9)
        assert row["auroc_std"] == pytest.approx(std, rel=1e-6, abs=1e-12)
        assert row["n_variants"] == 3
    assert result.best_value == result.table["auroc"].max()
    assert result.criterion == "auroc"
    # the returned detector is fitted on the full fit set through the model's own head
    expected = create("react", **result.best_params).fit(fit)
    np.testing.assert_array_equal(result.detector.score(id_val), expected.score(id_val))
    assert result.provenance == {
        "protocol": "held_out_classes", "search": "grid", "criterion": "auroc", "n_variants": 3,
        "held_out_fraction": 0.3, "retrain": "head", "seed": 0, "train": HEAD}


def test_variants_are_disjoint_splits_of_the_fit_classes(fit_val):
    fit, id_val = fit_val
    variants = VariantFactory(fit, id_val, HeldOutClasses(**_held_out(cache=False))).variants()
    assert len({tuple(v.withheld) for v in variants}) == 3  # independent draws
    for v in variants:
        assert v.withheld.size == 3 and v.kept.size == 7
        assert np.intersect1d(v.withheld, v.kept).size == 0
        assert (v.id_val.labels >= 0).all() and (v.fit.labels >= 0).all()  # re-indexed to kept
        assert (v.ood.labels == -1).all()
        assert len(v.fit) + len(v.id_val) + len(v.ood) == len(fit) + len(id_val)
        assert v.fit.head_weight.shape == (7, 32)  # the variant's own head
        assert 0.5 < v.id_val.correct.mean() <= 1.0  # the head learned the kept classes


def test_same_seed_same_choice_other_seed_other_variants(fit_val, tmp_path, monkeypatch):
    fit, id_val = fit_val
    space = {"lower_percentile": Range(0.0, 60.0), "upper_percentile": Range(70.0, 99.0),
             "slope": Range(0.0, 4.0)}

    def run(seed, cache):
        return oodbench.tune("plf_fold", space, id_val, None, fit=fit, protocol="held_out_classes",
                             held_out=_held_out(seed, cache=cache), search="tpe", n_trials=8,
                             seed=seed)

    monkeypatch.setenv("OODBENCH_CACHE", str(tmp_path))
    a, b = run(0, cache=True), run(0, cache=False)
    assert a.best_params == b.best_params
    cols = [*space, "auroc"]
    assert a.table[cols].equals(b.table[cols])
    c = run(1, cache=True)
    assert not a.table[cols].equals(c.table[cols])


def test_variants_are_cached_by_content(fit_val, tmp_path, monkeypatch):
    fit, id_val = fit_val
    monkeypatch.setenv("OODBENCH_CACHE", str(tmp_path))
    calls = []
    real = oodbench.train.train_head

    def counting(*args, **kwargs):
        calls.append(kwargs["seed"])
        return real(*args, **kwargs)

    monkeypatch.setattr(oodbench.train, "train_head", counting)
    grid = {"percentile": [80.0, 95.0]}

    def run(**kw):
        return oodbench.tune("react", grid, id_val, None, fit=fit, protocol="held_out_classes",
                             held_out=_held_out(**kw))

    first = run()
    assert calls == [0, 1, 2] and len(list((tmp_path / "tune" / "held_out").glob("*.npz"))) == 3
    second = oodbench.tune("ash_s", {"percentile": [85.0]}, id_val, None, fit=fit,
                           protocol="held_out_classes", held_out=_held_out())
    third = run()
    assert calls == [0, 1, 2]  # another detector and a re-run reuse the three heads
    assert third.table["auroc"].tolist() == first.table["auroc"].tolist()
    assert second.table["n_variants"].iloc[0] == 3
    run(train={"epochs": 4, "lr": 0.05})  # other training settings: other heads
    assert calls == [0, 1, 2, 0, 1, 2]
    changed = fit.subset(np.arange(len(fit)))
    changed.features = changed.features * 1.01
    oodbench.tune("react", grid, id_val, None, fit=changed, protocol="held_out_classes",
                  held_out=_held_out())
    assert len(calls) == 9  # other features: other heads


def test_number_of_withheld_classes_can_be_searched(fit_val):
    fit, id_val = fit_val
    grid = {"percentile": [90.0], "held_out_fraction": [0.2, 0.5]}
    result = oodbench.tune("react", grid, id_val, None, fit=fit, protocol="held_out_classes",
                           held_out=_held_out(n_variants=2))
    for fraction, row in zip((0.2, 0.5), result.table.itertuples()):
        [(mean, _)] = _reference("react", [{"percentile": 90.0}], fit, id_val, n_variants=2,
                                 fraction=fraction, seed=0)
        assert row.auroc == pytest.approx(mean, rel=1e-9)
    assert set(result.best_params) == {"percentile", "held_out_fraction"}
    assert result.detector.percentile == 90.0


def test_bad_input(fit_val):
    fit, id_val = fit_val

    def tune(name="react", grid=None, fit=fit, ood_val=None, **held_out):
        return oodbench.tune(name, grid if grid is not None else {"percentile": [90.0]}, id_val,
                             ood_val, fit=fit, protocol="held_out_classes",
                             held_out={"train": HEAD, **held_out})

    two = fit.subset(np.flatnonzero(fit.labels < 2))
    with pytest.raises(InvalidInputError, match="needs at least 3 classes in fit .* has 2") as err:
        tune(fit=two)
    assert "\n" not in str(err.value)  # the three errors the issue names are one line each
    with pytest.raises(InvalidInputError, match="withholds 0"):
        tune(held_out_fraction=0.01)
    with pytest.raises(InvalidInputError, match="withholds 10"):
        tune(held_out_fraction=0.99)
    with pytest.raises(InvalidInputError, match=r"held_out_fraction must be in \(0, 1\)"):
        tune(held_out_fraction=1.5)
    with pytest.raises(InvalidInputError, match="no hyper-parameter k; it takes fit_data, percentile, threshold") as err:
        tune(grid={"k": [5]})
    assert "\n" not in str(err.value)
    with pytest.raises(InvalidInputError, match="search space is empty") as err:
        tune(grid={})
    assert "\n" not in str(err.value)
    with pytest.raises(InvalidInputError, match="takes no ood_val"):
        tune(ood_val=id_val)
    with pytest.raises(InvalidInputError, match="pass fit=train_activations"):
        tune(fit=None)
    with pytest.raises(InvalidInputError, match="unknown train option"):
        tune(train={"epoch": 3})
    with pytest.raises(InvalidInputError, match="n_variants must be an integer >= 1"):
        tune(n_variants=0)
    with pytest.raises(InvalidInputError, match="runs the live network"):
        tune(name="odin", grid={"temperature": [1.0]})
    with pytest.raises(InvalidInputError, match="unknown protocol 'no_ood'"):
        oodbench.tune("react", {"percentile": [90.0]}, id_val, None, fit=fit, protocol="no_ood")
    no_shared = id_val.subset(np.flatnonzero(id_val.labels == 0))
    no_shared.labels = np.full(len(no_shared), 99)
    with pytest.raises(InvalidInputError, match="id_val has no sample of any of them"):
        oodbench.tune("react", {"percentile": [90.0]}, no_shared, None, fit=fit,
                      protocol="held_out_classes", held_out={"train": HEAD})


FULL = {"epochs": 1, "batch_size": 32, "lr": 0.05, "device": "cpu"}


@pytest.fixture(scope="module")
def digits():
    """SmallCNN (random init) on 300 fit and 150 validation digits, 10 classes."""
    from oodbench.data import DigitsSource
    from oodbench.extract import extract
    from oodbench.models.small_cnn import SmallCNN

    source, model = DigitsSource(), SmallCNN(num_classes=10, seed=0)
    rows = np.random.default_rng(0).permutation(len(source))
    fit, val = (extract(model, source.subset(np.sort(r)), device="cpu", progress=False)
                for r in (rows[:300], rows[300:450]))
    return model, fit, val


def test_full_retraining_matches_fine_tuning_by_hand(digits, tmp_path, monkeypatch):
    """retrain="full": each variant is the model with its head cut to the kept classes,
    fine-tuned with oodbench.train on the kept classes' fit images, re-extracted."""
    import copy

    import torch

    from oodbench.data import ArraySource
    from oodbench.extract import extract
    from oodbench.train import finetune

    model, fit, val = digits
    monkeypatch.setenv("OODBENCH_CACHE", str(tmp_path))
    epochs = []
    real_epoch = finetune._epoch
    monkeypatch.setattr(finetune, "_epoch", lambda *a: epochs.append(1) or real_epoch(*a))
    held_out = {"retrain": "full", "n_variants": 2, "held_out_fraction": 0.3, "train": FULL}
    grid = {"percentile": [80.0, 95.0]}
    result = oodbench.tune("react", grid, val, None, fit=fit, model=model,
                           protocol="held_out_classes", held_out=held_out)
    assert len(epochs) == 2  # one epoch per variant

    images = np.stack([np.asarray(fit.source.parent.load(int(i)).convert("L"))
                       for i in fit.source.indices])
    val_images = np.stack([np.asarray(val.source.parent.load(int(i)).convert("L"))
                           for i in val.source.indices])
    expected = np.zeros((2, 2))
    for i in range(2):  # by hand: withheld classes, cut head, oodbench.train, extract
        withheld = np.random.default_rng([0, i, 3]).choice(np.arange(10), size=3, replace=False)
        kept = np.setdiff1d(np.arange(10), withheld)
        net = copy.deepcopy(model)
        with torch.no_grad():
            net.fc.weight = torch.nn.Parameter(model.fc.weight[torch.as_tensor(kept)].clone())
            net.fc.bias = torch.nn.Parameter(model.fc.bias[torch.as_tensor(kept)].clone())
        net.fc.out_features, net.num_classes = kept.size, kept.size
        in_fit, in_val = np.isin(fit.labels, kept), np.isin(val.labels, kept)
        relabel = {int(c): j for j, c in enumerate(kept)}
        train_src = ArraySource(images[in_fit], np.array([relabel[int(v)] for v in fit.labels[in_fit]]),
                                name=fit.source.name)
        finetune.train(net, train_src, out=tmp_path / f"by-hand-{i}", seed=i, progress=False,
                       device=FULL["device"], optim=from_options(FULL, FINETUNE)[0])

        def acts(img, net=net):
            return extract(net, ArraySource(img, np.zeros(len(img), dtype=np.int64)), device="cpu",
                           progress=False, cache=False)

        for j, p in enumerate(grid["percentile"]):
            det = create("react", percentile=p).fit(acts(images[in_fit]))
            ood = np.concatenate([det.score(acts(images[~in_fit])), det.score(acts(val_images[~in_val]))])
            expected[j, i] = metrics.auroc(det.score(acts(val_images[in_val])), ood)
    np.testing.assert_allclose(result.table["auroc"], expected.mean(axis=1), rtol=1e-6)
    assert result.provenance["retrain"] == "full"

    again = oodbench.tune("react", grid, val, None, fit=fit, model=model,
                          protocol="held_out_classes", held_out=held_out)
    assert len(epochs) == 2 + 2  # the by-hand runs above; the re-run trained nothing
    assert again.table["auroc"].tolist() == result.table["auroc"].tolist()


def test_full_retraining_needs_the_model_and_the_images(digits, fit_val):
    model, fit, val = digits
    held_out = {"retrain": "full", "train": FULL}
    with pytest.raises(InvalidInputError, match="pass model=classifier"):
        oodbench.tune("react", {"percentile": [90.0]}, val, None, fit=fit,
                      protocol="held_out_classes", held_out=held_out)
    synthetic_fit, synthetic_val = fit_val
    with pytest.raises(InvalidInputError, match="do not know their source"):
        oodbench.tune("react", {"percentile": [90.0]}, synthetic_val, None, fit=synthetic_fit,
                      model=model, protocol="held_out_classes", held_out=held_out)
    with pytest.raises(InvalidInputError, match="unknown train option.*'full'"):
        oodbench.tune("react", {"percentile": [90.0]}, val, None, fit=fit, model=model,
                      protocol="held_out_classes", held_out={"retrain": "full", "train": {"trainable": "x", "epoch": 1}})
