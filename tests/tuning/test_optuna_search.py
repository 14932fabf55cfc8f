"""tune(search="tpe"): Optuna's TPE sampler, seeded, resumable, with ranges and choices.

The references are recomputed in this process by the same detectors (or network) on the same
rows, so they equal the tuned values to the last bit here, and on any CPU, where both sides
change alike; tolerances of 1e-12 relative (1e-9 for means over variants) only leave room for
the summation order of averages.
"""

from __future__ import annotations

import sys

import numpy as np
import pytest

import oodbench
from oodbench import metrics
from oodbench.detectors import create
from oodbench.errors import InvalidInputError, MissingDependencyError
from oodbench.tuning import Range
from tests.tuning.test_tune import data  # noqa: F401 - the shared fixture


def _auroc(name, point, train, id_val, ood_val):
    det = create(name, **point).fit(train)
    return metrics.auroc(det.score(id_val), det.score(ood_val))


def test_every_trial_is_scored_like_an_independent_fit(data):  # noqa: F811
    train, id_val, ood_val = data
    space = {"percentile": Range(50.0, 99.9)}
    result = oodbench.tune("react", space, id_val, ood_val, fit=train, search="tpe", n_trials=12)
    table = result.table
    assert len(table) == 12 and (table["status"] == "ok").all()
    assert table["trial"].tolist() == list(range(12))
    for _, row in table.iterrows():
        assert 50.0 <= row["percentile"] <= 99.9
        expected = _auroc("react", {"percentile": row["percentile"]}, train, id_val, ood_val)
        assert row["auroc"] == pytest.approx(expected, rel=1e-12)
    assert result.best_value == table["auroc"].max()
    assert result.best_params == {"percentile": table.loc[table["auroc"].idxmax(), "percentile"]}
    assert result.detector.percentile == result.best_params["percentile"]
    assert result.provenance == {"protocol": "ood_val", "search": "tpe", "criterion": "auroc",
                                 "n_trials": 12, "sampler_seed": 0}
    assert '"search": "tpe"' in result.tuning_record()


def test_same_seed_same_points_other_seed_other_points(data):  # noqa: F811
    train, id_val, ood_val = data
    space = {"lower_percentile": Range(0.0, 60.0), "upper_percentile": Range(70.0, 99.0),
             "per_unit": [True, False]}

    def run(seed):
        return oodbench.tune("vra", space, id_val, ood_val, fit=train, search="tpe",
                             n_trials=15, seed=seed)

    a, b, c = run(0), run(0), run(1)
    cols = ["lower_percentile", "upper_percentile", "per_unit", "auroc"]
    assert a.table[cols].equals(b.table[cols])
    assert a.best_params == b.best_params
    assert not a.table[cols].equals(c.table[cols])
    assert set(a.table["per_unit"]) <= {True, False}  # choices come back as the listed values


def test_integer_range_and_lower_is_better(data):  # noqa: F811
    train, id_val, ood_val = data
    result = oodbench.tune("knn", {"k": Range(1, 40)}, id_val, ood_val, fit=train, search="tpe",
                           n_trials=10, criterion="fpr95_ood")
    assert all(isinstance(k, (int, np.integer)) for k in result.table["k"])
    assert result.best_value == result.table["fpr95_ood"].min()


def test_rejected_points_are_recorded_and_never_win(data):  # noqa: F811
    """Independent ranges can put VRA's lower percentile above its upper one."""
    train, id_val, ood_val = data
    space = {"lower_percentile": Range(40.0, 95.0), "upper_percentile": Range(50.0, 99.0)}
    result = oodbench.tune("vra", space, id_val, ood_val, fit=train, search="tpe", n_trials=20)
    invalid = result.table["status"].str.startswith("invalid")
    assert invalid.any() and (~invalid).any()
    assert (result.table.loc[invalid, "lower_percentile"] >
            result.table.loc[invalid, "upper_percentile"]).all()
    assert not result.table.loc[invalid, "best"].any()


def test_resume_from_storage(data, tmp_path):  # noqa: F811
    train, id_val, ood_val = data
    storage = f"sqlite:///{tmp_path / 'tune.db'}"
    space = {"percentile": Range(50.0, 99.9)}
    kwargs = dict(fit=train, search="tpe", storage=storage, study_name="react-auroc")
    first = oodbench.tune("react", space, id_val, ood_val, n_trials=4, **kwargs)
    resumed = oodbench.tune("react", space, id_val, ood_val, n_trials=7, **kwargs)
    assert len(resumed.table) == 7
    cols = ["trial", "percentile", "auroc"]
    assert resumed.table[cols].head(4).equals(first.table[cols])
    again = oodbench.tune("react", space, id_val, ood_val, n_trials=7, **kwargs)
    assert again.table[cols].equals(resumed.table[cols])  # nothing left to run
    with pytest.raises(InvalidInputError, match="belongs to another search"):
        oodbench.tune("react", {"percentile": Range(60.0, 99.0)}, id_val, ood_val, n_trials=7,
                      **kwargs)


def test_ctrl_c_is_one_exception_without_optunas_traceback(data, tmp_path, monkeypatch, capfd):  # noqa: F811
    """Issue 23 item 4: Ctrl-C during TPE tuning printed Optuna's 30-line traceback; the trial it
    stopped is not counted, and a resume runs it again."""
    from oodbench.detectors import detector_class
    from oodbench.errors import Interrupted

    train, id_val, ood_val = data
    storage = f"sqlite:///{tmp_path / 'tune.db'}"
    kwargs = dict(fit=train, search="tpe", storage=storage, study_name="react", n_trials=5)
    space = {"percentile": Range(50.0, 99.9)}
    cls = detector_class("react")
    original, calls = cls._score, []

    def ctrl_c_in_the_third_trial(self, acts):
        calls.append(1)
        if len(calls) == 5:  # two scores (ID-val, OOD-val) per trial
            raise KeyboardInterrupt
        return original(self, acts)

    monkeypatch.setattr(cls, "_score", ctrl_c_in_the_third_trial)
    with pytest.raises(Interrupted, match=r"2 of 5 TPE trials finished in sqlite:///.*; run the "
                                          "same search again to resume"):
        oodbench.tune("react", space, id_val, ood_val, **kwargs)
    err = capfd.readouterr().err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err and "failed" not in err, err
    monkeypatch.setattr(cls, "_score", original)
    resumed = oodbench.tune("react", space, id_val, ood_val, **kwargs)
    assert len(resumed.table) == 5 and set(resumed.table["status"]) == {"ok"}
    assert resumed.table["trial"].tolist() == [0, 1, 3, 4, 5]  # trial 2 was stopped, not counted


def test_progress_bar(data, capsys):  # noqa: F811
    train, id_val, ood_val = data
    oodbench.tune("react", {"percentile": [80.0, 90.0]}, id_val, ood_val, fit=train,
                  search="tpe", n_trials=2, progress=True)
    assert "2/2" in capsys.readouterr().err


def test_errors(data, monkeypatch):  # noqa: F811
    train, id_val, ood_val = data
    with pytest.raises(InvalidInputError, match="search space is empty"):
        oodbench.tune("react", {}, id_val, ood_val, fit=train, search="tpe")
    with pytest.raises(InvalidInputError, match="no hyper-parameter k"):
        oodbench.tune("react", {"k": Range(1, 5)}, id_val, ood_val, fit=train, search="tpe")
    with pytest.raises(InvalidInputError, match="grid search needs a list"):
        oodbench.tune("react", {"percentile": Range(80.0, 99.0)}, id_val, ood_val, fit=train)
    with pytest.raises(InvalidInputError, match="low <= high"):
        Range(5.0, 1.0)
    with pytest.raises(InvalidInputError, match="unknown search 'random'"):
        oodbench.tune("react", {"percentile": [90.0]}, id_val, ood_val, fit=train, search="random")
    with pytest.raises(InvalidInputError, match="n_trials"):
        oodbench.tune("react", {"percentile": [90.0]}, id_val, ood_val, fit=train, search="tpe",
                      n_trials=0)
    with pytest.raises(InvalidInputError, match="needs a study_name"):
        oodbench.tune("react", {"percentile": [90.0]}, id_val, ood_val, fit=train, search="tpe",
                      storage="sqlite:///:memory:")
    with pytest.raises(InvalidInputError, match="unknown option 'n_trial' .*'n_trials'"):
        oodbench.tune("react", {"percentile": [90.0]}, id_val, ood_val, fit=train, search="tpe",
                      n_trial=5)
    monkeypatch.setitem(sys.modules, "optuna", None)  # as if optuna were not installed
    with pytest.raises(MissingDependencyError, match=r"oodbench\[tune\]"):
        oodbench.tune("react", {"percentile": [90.0]}, id_val, ood_val, fit=train, search="tpe")
