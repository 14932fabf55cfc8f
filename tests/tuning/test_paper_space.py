"""The tuning paper's search spaces (arXiv 2602.05935, App. A) as data, GP Bayesian optimisation
through Optuna's GPSampler (seeded, resumable), and the one-line errors for spaces that do not fit
the detector."""

from __future__ import annotations

import numpy as np
import pytest

import oodbench
from oodbench.detectors import detector_class
from oodbench.errors import ConfigError, InvalidInputError
from oodbench.tuning import Range
from oodbench.tuning.paper_space import paper_detectors, paper_source, paper_space, parse_spaces
from tests.tuning.test_tune import data  # noqa: F401 - the shared fixture


def test_spaces_are_app_a(data):  # noqa: F811
    train = data[0]
    assert paper_detectors() == ["ash_b", "knn", "plf", "react", "vra_plus"]
    assert paper_space("knn") == {"k": Range(1, 500)}
    assert paper_space("vra_plus") == {"eta_alpha": Range(0.1, 0.8), "u": Range(0.0, 1.0),
                                       "gamma": Range(0.0, 5.0)}
    assert paper_space("plf") == {
        "y_start": Range(-5.0, 0.0), "y_end": Range(0.0, 5.0), "delta_y": Range(0.0, 5.0),
        "q1": Range(0.1, 0.8), "u": Range(0.0, 1.0), "m1": Range(0.0, 5.0), "m2": Range(-5.0, 5.0)}
    react = paper_space("react", train)["threshold"]  # tau over the range of the ID activations
    assert (react.low, react.high) == (float(train.features.min()), float(train.features.max()))
    assert "ASH-B" in paper_source("ash_b") and "K_max = 500" in paper_source("knn")
    for name in paper_detectors():  # every space names real hyper-parameters of a real detector
        fields = {f for f in detector_class(name).__dataclass_fields__}
        assert set(paper_space(name, train)) <= fields, name


def test_paper_space_is_searched_by_gp_and_recorded(data):  # noqa: F811
    train, id_val, ood_val = data
    result = oodbench.tune("vra_plus", "paper", id_val, ood_val, fit=train, n_trials=12)
    assert result.provenance["search"] == "gp" and result.provenance["grid"] == "paper"
    assert '"grid": "paper"' in result.detector.tuning
    table = result.table
    assert len(table) == 12 and (table["status"] == "ok").all()
    assert table["eta_alpha"].between(0.1, 0.8).all() and table["gamma"].between(0.0, 5.0).all()
    assert result.best_value == table["auroc"].max()


def test_gp_same_seed_same_points_other_seed_other_points(data):  # noqa: F811
    train, id_val, ood_val = data
    cols = ["q1", "u", "m2", "auroc"]

    def run(seed):
        return oodbench.tune("plf", "paper", id_val, ood_val, fit=train, search="gp",
                             n_trials=13, seed=seed)

    a, b, c = run(0), run(0), run(1)
    assert a.table[cols].equals(b.table[cols]) and a.best_params == b.best_params
    assert not a.table[cols].equals(c.table[cols])


def test_gp_resumes_from_storage(data, tmp_path):  # noqa: F811
    train, id_val, ood_val = data
    kwargs = dict(fit=train, search="gp", storage=f"sqlite:///{tmp_path / 't.db'}", study_name="knn")
    first = oodbench.tune("knn", "paper", id_val, ood_val, n_trials=11, **kwargs)
    resumed = oodbench.tune("knn", "paper", id_val, ood_val, n_trials=13, **kwargs)
    assert resumed.table[["trial", "k", "auroc"]].head(11).equals(first.table[["trial", "k", "auroc"]])
    assert len(resumed.table) == 13
    with pytest.raises(InvalidInputError, match="belongs to another search"):
        oodbench.tune("knn", "paper", id_val, ood_val, n_trials=13, **{**kwargs, "search": "tpe"})


@pytest.mark.parametrize(("name", "space", "message"), [
    ("plf", {"q2": Range(0.2, 0.9)}, "has no hyper-parameter q2"),
    ("plf", {"q1": Range(0.1, 0.95)}, r"space\['q1'\] bound 0.95 is outside the valid range"),
    ("vra_plus", {"u": Range(0.0, 1.5)}, r"space\['u'\] bound 1.5 is outside the valid range"),
    ("knn", {"k": Range(0, 50)}, r"space\['k'\] bound 0 is outside the valid range"),
    ("react", {"percentile": [90.0, 120.0]}, r"space\['percentile'\] value 120.0 is outside"),
])
def test_bad_spaces_fail_in_one_line_before_any_fit(data, name, space, message, monkeypatch):  # noqa: F811
    train, id_val, ood_val = data
    cls = detector_class(name)
    monkeypatch.setattr(cls, "_fit", lambda *a, **k: pytest.fail("fitted before the check"))
    with pytest.raises(InvalidInputError, match=message) as err:
        oodbench.tune(name, space, id_val, ood_val, fit=train, search="gp", n_trials=3)
    assert "\n" not in str(err.value)


def test_unknown_paper_space_and_missing_fit(data):  # noqa: F811
    train, id_val, ood_val = data
    with pytest.raises(InvalidInputError, match="gives no search space for 'mahalanobis'"):
        oodbench.tune("mahalanobis", "paper", id_val, ood_val, fit=train)
    with pytest.raises(InvalidInputError, match="pass fit="):
        paper_space("react", None)
    assert np.isfinite(paper_space("react", train)["threshold"].high)



@pytest.mark.parametrize(("text", "message"), [
    ('[knn]\nk = { lo = 1, high = 500 }\n',
     "spaces.toml: [knn].k: unknown key 'lo'; did you mean 'low'? valid keys: low, high"),
    ('[knn]\nsorce = "s"\nk = { low = 1, high = 500 }\n',
     "spaces.toml: [knn]: unknown key 'sorce'; did you mean 'source'? valid keys: source, note, "
     "<hyper-parameter>"),
    ('[knn]\nk = { low = "id_mn", high = 500 }\n',
     "spaces.toml: [knn].k.low: expected a number or one of 'id_min', 'id_max', got 'id_mn'"),
])
def test_a_typo_in_the_spaces_file_names_the_file_the_key_and_the_closest_key(text, message):
    with pytest.raises(ConfigError) as err:
        parse_spaces(text, "spaces.toml")
    assert str(err.value) == message
    assert parse_spaces('[knn]\nsource = "s"\nk = { low = 1, high = 500 }\n', "x")["knn"].intervals[
        "k"].high == 500
