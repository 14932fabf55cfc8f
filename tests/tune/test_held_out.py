"""tune(protocol="held_out_classes"): the simulated ID/OOD variants, the aggregate over them,
determinism, the variant cache and the bad-input messages."""

from __future__ import annotations

import numpy as np
import pytest

import oodbench
import oodbench.train
from oodbench import metrics
from oodbench.detectors import create
from oodbench.errors import InvalidInputError
from oodbench.train import train_head
from oodbench.tune import Range
from oodbench.tune.held_out import HeldOutClasses, VariantFactory
from tests.detectors.conftest import make_activations

HEAD = {"epochs": 3, "lr": 0.05}


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
        head = train_head(fit, classes=kept, seed=seed * 1000 + i, **HEAD)
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
    return {"n_variants": 3, "held_out_fraction": 0.3, "seed": seed, "head": HEAD, **kw}


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
        "held_out_fraction": 0.3, "retrain": "head", "seed": 0, "head": HEAD}


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
        return oodbench.tune("plf", space, id_val, None, fit=fit, protocol="held_out_classes",
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
    run(head={"epochs": 4, "lr": 0.05})  # other training settings: other heads
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
                             held_out={"head": HEAD, **held_out})

    two = fit.subset(np.flatnonzero(fit.labels < 2))
    with pytest.raises(InvalidInputError, match="needs at least 3 classes in fit .* has 2"):
        tune(fit=two)
    with pytest.raises(InvalidInputError, match="withholds 0"):
        tune(held_out_fraction=0.01)
    with pytest.raises(InvalidInputError, match="withholds 10"):
        tune(held_out_fraction=0.99)
    with pytest.raises(InvalidInputError, match="strictly between 0 and 1"):
        tune(held_out_fraction=1.5)
    with pytest.raises(InvalidInputError, match="no hyper-parameter k; it takes percentile"):
        tune(grid={"k": [5]})
    with pytest.raises(InvalidInputError, match="search space is empty"):
        tune(grid={})
    with pytest.raises(InvalidInputError, match="takes no ood_val"):
        tune(ood_val=id_val)
    with pytest.raises(InvalidInputError, match="pass fit=train_activations"):
        tune(fit=None)
    with pytest.raises(InvalidInputError, match="unknown head option"):
        tune(head={"epoch": 3})
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
                      protocol="held_out_classes", held_out={"head": HEAD})
