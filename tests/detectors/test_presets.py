"""Protocol presets: the data file is complete and consistent with the registry, presets give the
configured values and fit data, explicit arguments override them, and provenance is recorded."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from oodbench.detectors import available, create, detector_class
from oodbench.detectors.base import _REGISTRY, FIT_DATA
from oodbench.detectors.presets import (
    PROTOCOLS,
    configured_detectors,
    parse_presets,
    preset_for,
    presets_of,
    protocols,
    unavailable_reason,
)
from oodbench.errors import ConfigError, InvalidInputError, UnknownNameError

#: class defaults that differ from the paper's ImageNet setting, and why (small banks)
DEFAULTS_NOT_PAPER = {
    "knn": {"k"},  # the paper's k = 1000 needs the 1.28M-image bank; the default 50 works on small ones
    "nnguide": {"fit_fraction"},  # the paper's 1 % bank is for ImageNet's 1.28M training images
}


#: detectors without a published configuration (the presets file says why)
NO_PAPER_PRESET = {"plf", "vra_plus", "plf_fold"}


def test_every_detector_has_a_paper_entry_and_the_file_names_only_real_detectors():
    assert set(configured_detectors()) == set(_REGISTRY)  # a "paper" entry for every detector
    assert set(protocols()) == set(PROTOCOLS)
    for name in _REGISTRY:
        if name in NO_PAPER_PRESET:
            assert "no published default" in (unavailable_reason(name, "paper") or ""), name
            continue
        assert "paper" in presets_of(name), name
        assert preset_for(name, "paper").source, name


@pytest.mark.parametrize("name", sorted(_REGISTRY))
def test_every_preset_builds_and_its_grid_is_valid(name):
    fields = {f.name for f in dataclasses.fields(detector_class(name)) if f.init}
    for protocol in presets_of(name):
        preset = preset_for(name, protocol)
        assert set(preset.hyperparams) <= fields, (name, protocol)
        det = create(name, preset=protocol)
        assert det.preset == protocol and det.protocol == protocol
        for key, value in preset.hyperparams.items():
            assert det.hyperparams[key] == value
        if det.fits_on_data:
            assert preset.fit_data in FIT_DATA, (name, protocol)  # every protocol names its fit data
            assert det.fit_data == preset.fit_data
        else:
            assert preset.fit_data is None and det.fit_data == "none"
        for key, values in (preset.grid or {}).items():
            assert key in fields
            for value in values:
                create(name, preset=protocol, **{key: value})
        assert preset.grid is None or protocol == "openood"  # only OpenOOD has sweeps


def test_defaults_are_the_papers_except_where_documented():
    for name in set(_REGISTRY) - NO_PAPER_PRESET:
        default, paper = create(name).hyperparams, create(name, preset="paper").hyperparams
        changed = {k for k in default if default[k] != paper[k]}
        assert changed == DEFAULTS_NOT_PAPER.get(name, set()), name


def test_openood_values_as_read_from_its_configs():
    """Spot checks against OpenOOD v1.5 (commit 3c35632): configs/postprocessors/*.yml and the
    loader each postprocessor's setup() fits on."""
    expect = {
        "knn": ({"k": 50}, "train"), "vim": ({"dim": 256}, "train"),
        "react": ({"percentile": 90.0}, "id_val"), "dice": ({"sparsity": 90.0}, "train"),
        "ash_b": ({"percentile": 90.0}, None), "scale": ({"percentile": 85.0}, None),
        "vra": ({"lower_percentile": 10.0, "upper_percentile": 90.0, "per_unit": False,
                 "clip_low": True}, "id_val"),
        "nnguide": ({"k": 100, "fit_fraction": 0.01}, "train"),
        "odin": ({"temperature": 1000.0, "epsilon": 0.0014}, None),
        "klm": ({}, "id_val"), "temperature_scaling": ({}, "id_val"),
        "gen": ({"gamma": 0.1, "M": 100}, None), "nci": ({"alpha": 1e-4}, "train"),
    }
    for name, (values, fit_data) in expect.items():
        preset = preset_for(name, "openood")
        assert {k: preset.hyperparams[k] for k in values} == values, name
        assert preset.fit_data == fit_data, name
    assert preset_for("knn", "openood").grid == {"k": (50, 100, 200, 500, 1000)}
    assert preset_for("dice", "openood").grid is None  # APS_mode: False


def test_c_ood_presets():
    assert create("odin", preset="cood").hyperparams["temperature"] == 2.0
    code = create("odin", preset="cood_code")
    assert (code.gradient, code.input_std, code.epsilon) == ("probabilities", (0.229, 0.224, 0.225), 1e-5)
    assert create("mc_dropout", preset="cood").vit_drop_rate == 0.1
    assert presets_of("msp") == ["paper", "openood", "cood", "cood_code"]
    assert "cood" not in presets_of("knn")


def test_explicit_arguments_override_the_preset_and_the_label_says_so():
    det = create("knn", preset="openood", k=7)
    assert det.k == 7 and det.preset == "openood"
    assert det.protocol == "openood (modified: k)"
    assert det.provenance() == {"preset": "openood (modified: k)", "fit_data": "train", "tuning": ""}
    react = create("react", preset="openood", fit_data="train")
    assert react.protocol == "openood (modified: fit_data)"
    assert create("react").provenance()["preset"] == ""  # no preset: the class defaults


def test_missing_presets_and_unknown_protocols_say_why():
    with pytest.raises(InvalidInputError, match="ASH-B"):
        create("ash_p", preset="openood")
    assert "Block 3" in (unavailable_reason("rankfeat", "openood") or "")
    with pytest.raises(InvalidInputError, match="only softmax, max-logit, entropy, ODIN and MC-dropout"):
        create("knn", preset="cood")
    with pytest.raises(UnknownNameError, match="openood"):
        create("knn", preset="opennood")


def test_fit_data_validation():
    with pytest.raises(InvalidInputError, match="learns nothing from ID data"):
        create("msp", fit_data="train")
    with pytest.raises(InvalidInputError, match="fit_data must be one of"):
        create("knn", fit_data="test")
    assert create("msp").hyperparams == {}  # no fit_data for detectors that fit nothing
    assert create("knn", fit_data="id_val").hyperparams["fit_data"] == "id_val"


def test_listing_shows_presets_and_fit_data():
    rows = {r["name"]: r for r in available()}
    assert rows["react"]["presets"] == ["paper", "openood"]
    assert rows["temperature_scaling"]["defaults"]["fit_data"] == "id_val"
    assert "fit_data" not in rows["msp"]["defaults"]


def test_score_only_hyperparameters_are_real_fields_that_do_not_change_the_fit():
    """Each declared score-only hyper-parameter is a field; changing it after fit gives the
    scores of a fresh fit with that value (checked where a second value exists cheaply)."""
    from tests.detectors.conftest import make_activations

    for name, cls in _REGISTRY.items():
        fields = {f.name for f in dataclasses.fields(cls) if f.init}
        assert cls.score_only_hyperparams <= fields, name
    train, test = make_activations(300, 10, 32, seed=0), make_activations(100, 10, 32, seed=1)
    for name, changes in {"knn": {"k": 7}, "nnguide": {"k": 7}, "nci": {"alpha": 0.1},
                          "fdbd": {"distance_to_mean": False},
                          "vra": {"gamma": 0.3, "clip_low": True}}.items():
        det = create(name).fit(train)
        for key, value in changes.items():
            setattr(det, key, value)
        fresh = create(name, **changes).fit(train)
        np.testing.assert_array_equal(det.score(test), fresh.score(test))  # the same code in this process


def test_settings_a_preset_leaves_alone_are_not_a_change_of_protocol():
    assert create("odin", preset="cood_code", batch_size=8, device="cpu").protocol == "cood_code"
    assert create("odin", preset="cood_code", temperature=1.0).protocol == "cood_code (modified: temperature)"


PRESETS = """
[protocols.paper]
title = "t"
source = "s"
[detectors.knn.paper]
hyperparams = { k = 1000 }
fit_data = "train"
"""


@pytest.mark.parametrize(("typo", "fixed", "message"), [
    ("hyperparam =", "hyperparams =", "presets.toml: [detectors].knn.paper: unknown key 'hyperparam'; "
     "did you mean 'hyperparams'? valid keys: hyperparams, fit_data, grid, source, note, unavailable"),
    ("[detectors.knn.papr]", "[detectors.knn.paper]", "presets.toml: [detectors.knn]: unknown key "
     "'papr'; did you mean 'paper'? valid keys: paper"),
    ("titel =", "title =", "presets.toml: [protocols].paper: unknown key 'titel'; did you mean "
     "'title'? valid keys: title, source, unavailable"),
])
def test_a_typo_in_the_presets_file_names_the_file_the_key_and_the_closest_key(typo, fixed, message):
    assert parse_presets(PRESETS, "presets.toml").detectors["knn"]["paper"].hyperparams == {"k": 1000}
    with pytest.raises(ConfigError) as err:
        parse_presets(PRESETS.replace(fixed, typo), "presets.toml")
    assert str(err.value) == message
