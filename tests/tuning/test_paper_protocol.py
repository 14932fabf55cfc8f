"""tune(protocol="held_out_paper"): Algorithms 1-4 of arXiv 2602.05935 against a restatement,
same seed -> same phi and M*, resumable searches, the paper's defaults, and one-line errors
before any training.

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
from oodbench.train import train_head
from oodbench.tuning import Range
from oodbench.tuning.protocols.paper_protocol import paper_defaults
from tests.tuning.test_held_out import HEAD, HEAD_OPTIM, fit_val  # noqa: F401 - the shared fixture


def _settings(seed=0, **kw):
    return {"m_grid": [2, 3], "n_variants": 2, "n_tuning_sets": 3, "retrain": "head",
            "seed": seed, "train": HEAD, **kw}


def _restated(name, points, fit, id_val, m_grid, n_variants, n_sets, seed):
    """Algorithms 1-3 written out from the module docstring: returns (phi*_M, l, l_hat) per M."""
    classes = np.unique(fit.labels)
    out = {}
    for m in m_grid:
        pools = []
        for i in range(n_variants):  # Algorithm 1
            withheld = np.random.default_rng([seed, i, m]).choice(classes, size=m, replace=False)
            kept = np.setdiff1d(classes, withheld)
            head = train_head(fit, classes=kept, seed=seed * 1000 + i, optim=HEAD_OPTIM)
            in_fit, in_val = np.isin(fit.labels, kept), np.isin(id_val.labels, kept)
            pools.append((head.apply(fit.subset(np.flatnonzero(in_fit))),
                          head.apply(id_val.subset(np.flatnonzero(in_val))),
                          [head.apply(fit.subset(np.flatnonzero(~in_fit))),
                           head.apply(id_val.subset(np.flatnonzero(~in_val)))]))

        def loss(point, stage, pools=pools, m=m):  # Eq. (1) on balanced bootstrap sets
            values = []
            for i, (train, sim_id, sim_ood) in enumerate(pools):
                det = create(name, **point).fit(train)
                s_id = det.score(sim_id)
                s_ood = np.concatenate([det.score(a) for a in sim_ood])
                k = min(len(s_id), len(s_ood))
                for j in range(n_sets):
                    rng = np.random.default_rng([seed, m, i, j, stage])
                    a, b = rng.integers(0, len(s_id), size=k), rng.integers(0, len(s_ood), size=k)
                    values.append(metrics.auroc(s_id[a], s_ood[b]))
            return float(np.mean(values))

        objective = [loss(p, 0) for p in points]  # Algorithm 2 (a grid here)
        best = int(np.argmax(objective))
        out[m] = (points[best], objective[best], loss(points[best], 1))  # Algorithm 3
    return out


def test_matches_algorithms_1_to_4_restated(fit_val):  # noqa: F811
    fit, id_val = fit_val
    grid = {"percentile": [60.0, 80.0, 95.0, 99.5]}
    result = oodbench.tune("react", grid, id_val, None, fit=fit, protocol="held_out_paper",
                           held_out=_settings())
    ref = _restated("react", [{"percentile": p} for p in grid["percentile"]], fit, id_val,
                    [2, 3], 2, 3, seed=0)
    per_m = {r["M"]: r for r in result.provenance["per_m"]}
    for m, (phi, value, validation) in ref.items():
        assert per_m[m]["best_params"] == phi
        assert per_m[m]["objective"] == pytest.approx(value, rel=1e-12)
        assert per_m[m]["validation"] == pytest.approx(validation, rel=1e-12)
    m_star = max(ref, key=lambda m: ref[m][2])
    assert result.provenance["m_star"] == m_star
    assert result.best_params == ref[m_star][0] and result.best_value == pytest.approx(ref[m_star][2])
    final = create("react", **ref[m_star][0]).fit(fit)  # Algorithm 4: on the original network
    np.testing.assert_array_equal(result.detector.score(id_val), final.score(id_val))
    table = result.table
    assert len(table) == 8 and set(table["M"]) == {2, 3} and table["best"].sum() == 1
    assert result.provenance["n_tuning_sets"] == 3 and result.provenance["retrain"] == "head"
    assert '"protocol": "held_out_paper"' in result.detector.tuning


def _gp(fit, id_val, seed, **kw):
    return oodbench.tune("vra_plus", "paper", id_val, None, fit=fit, protocol="held_out_paper",
                         held_out=_settings(seed=seed), n_trials=11, seed=seed, **kw)


def test_same_seed_same_phi_and_m_star_other_seed_other_search(fit_val):  # noqa: F811
    fit, id_val = fit_val
    a, b, c = _gp(fit, id_val, 0), _gp(fit, id_val, 0), _gp(fit, id_val, 1)
    assert a.provenance["search"] == "gp"
    assert a.best_params == b.best_params and a.provenance["m_star"] == b.provenance["m_star"]
    cols = ["M", "eta_alpha", "u", "gamma", "auroc"]
    assert a.table[cols].equals(b.table[cols])
    assert not a.table[cols].equals(c.table[cols])


def test_each_m_search_resumes_from_storage(fit_val, tmp_path):  # noqa: F811
    fit, id_val = fit_val
    kw = {"storage": f"sqlite:///{tmp_path / 'p.db'}", "study_name": "vra"}
    first = oodbench.tune("vra_plus", "paper", id_val, None, fit=fit, protocol="held_out_paper",
                          held_out=_settings(), n_trials=10, seed=0, **kw)
    resumed = _gp(fit, id_val, 0, **kw)
    cols = ["M", "trial", "eta_alpha", "u", "gamma", "auroc"]
    for m in (2, 3):
        done = first.table[first.table["M"] == m][cols].reset_index(drop=True)
        again = resumed.table[resumed.table["M"] == m][cols].head(10).reset_index(drop=True)
        assert again.equals(done)
    assert len(resumed.table) == 22


def test_paper_defaults_for_the_dataset_size():
    assert paper_defaults(10) == ((1, 2, 3, 4, 5), 10)  # CIFAR-10
    assert paper_defaults(100) == ((5, 10, 15, 20, 25, 30, 35, 40), 10)  # CIFAR-100
    assert paper_defaults(200) == ((10, 20, 30, 40), 3)  # ImageNet-200
    assert paper_defaults(1000) == ((50, 100, 150, 200, 250, 300), 5)  # ImageNet-1K
    assert paper_defaults(700) == ((35, 70, 105, 140, 175, 210), 5)  # scaled from ImageNet-1K


@pytest.mark.parametrize(("space", "settings", "message"), [
    ({"percentile": [90.0]}, {"m_grid": [2, 10]}, r"M=10, but M must be an integer in \[1, 8\]"),
    ({"percentile": [90.0]}, {"m_grid": [0, 2]}, r"m_grid must be a non-empty list, each an integer >= 1"),
    ({"percentile": [90.0]}, {"n_tuning_sets": 0}, r"n_tuning_sets must be an integer >= 1 \(S, "),
    ({"percentile": [90.0]}, {"retrain": "all"}, "retrain must be one of"),
    ({"percentile": [90.0]}, {"m_gird": [2]}, r"unknown setting\(s\) \['m_gird'\]"),
    ({"tau": [1.0]}, {}, "detector 'react' has no hyper-parameter tau"),
    ({"percentile": Range(50.0, 101.0)}, {}, r"space\['percentile'\] bound 101.0 is outside"),
])
def test_bad_input_fails_in_one_line_before_any_training(  # noqa: F811
        fit_val, monkeypatch, space, settings, message):  # noqa: F811
    fit, id_val = fit_val
    monkeypatch.setattr(oodbench.train, "train_head",
                        lambda *a, **k: pytest.fail("trained before the input was checked"))
    search = "gp" if any(isinstance(v, Range) for v in space.values()) else "grid"
    with pytest.raises(InvalidInputError, match=message) as err:
        oodbench.tune("react", space, id_val, None, fit=fit, protocol="held_out_paper",
                      held_out={**_settings(), **settings}, search=search, n_trials=3)
    assert "\n" not in str(err.value)
