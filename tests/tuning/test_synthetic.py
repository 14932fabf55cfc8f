"""The noise and FGSM tuning protocols (arXiv 2602.05935, Sec. 3-4.1, Eq. 3-4) against a
restatement of the paper's equations on a fixed seed, h chosen on fresh sets, disjoint draws,
and one-line errors before any image is generated; the experiment file's tune table.

The restatements run the same arithmetic in the same order (numpy's normal draws, the same
torch ops on one batch), so they agree to the last bit; FGSM's sign of a gradient is compared
exactly (a batch of <= 256 images is one autograd pass on both sides).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import oodbench
import oodbench.tuning.protocols.synthetic as synthetic
from oodbench import metrics
from oodbench.detectors import create
from oodbench.errors import ConfigError, InvalidInputError
from oodbench.schema import parse
from oodbench.tuning import Range
from oodbench.tuning.protocols.held_out import Variant
from oodbench.tuning.protocols.paper_protocol import tuning_sets as paper_sets
from oodbench.tuning.protocols.synthetic import Synthetic, id_pixels, normalisation, set_images
from oodbench.tuning.spec import TuneSpec


def _pixels(model, id_val, config):
    mean, std = normalisation(model, config)
    return mean, std, id_pixels(model, id_val, mean, std)


def test_noise_sets_restate_the_paper(tiny):
    """Set j: k = |id_val| ID rows drawn with replacement by default_rng([seed, t, j, stage]),
    then k images of clip(N(128, sigma^2), 0, 255) / 255 per pixel (Sec. 4.1), sigma = the
    t-th level."""
    model, _, id_val, _ = tiny
    config = Synthetic(kind="noise", levels=(32.0, 64.0), n_sets=3, seed=7)
    mean, std, pixels = _pixels(model, id_val, config)
    n = len(id_val.labels)
    for stage in (0, 1):
        sets = set_images(model, np.asarray(id_val.labels), config, 1, stage, mean, std, pixels)
        assert len(sets) == 3
        for j, (rows, images) in enumerate(sets):
            rng = np.random.default_rng([7, 1, j, stage])
            expected_rows = rng.integers(0, n, size=n)
            expected = np.clip(128.0 + 64.0 * rng.standard_normal((n, 3, 32, 32)), 0, 255) / 255
            np.testing.assert_array_equal(rows, expected_rows)
            np.testing.assert_array_equal(images.numpy(), expected.astype(np.float32))


def test_fgsm_sets_restate_eq4(tiny):
    """OOD set j = the FGSM images of ID set j: x + eps * sign(grad_x BCE(logits, onehot(y))),
    clipped to [0, 1] (Eq. 4), x the ID image in [0, 1]."""
    model, _, id_val, _ = tiny
    config = Synthetic(kind="fgsm", levels=(0.005, 0.1), n_sets=2, seed=3)
    mean, std, pixels = _pixels(model, id_val, config)
    labels = np.asarray(id_val.labels)
    x = pixels.clone().requires_grad_(True)
    logits = model((x - mean) / std).float()
    bce = torch.nn.functional.binary_cross_entropy_with_logits(
        logits, torch.nn.functional.one_hot(torch.as_tensor(labels.copy()), logits.shape[1]).float())
    grad = torch.autograd.grad(bce, x)[0]
    adversarial = (pixels + 0.1 * grad.sign()).clamp(0, 1)
    assert grad.abs().min() > 0  # every sign is defined
    sets = set_images(model, labels, config, 1, 0, mean, std, pixels)
    for j, (rows, images) in enumerate(sets):
        rng = np.random.default_rng([3, 1, j, 0])
        np.testing.assert_array_equal(rows, rng.integers(0, len(labels), size=len(labels)))
        np.testing.assert_array_equal(images.numpy(), adversarial[torch.from_numpy(rows)].numpy())
    moved = (images - pixels[torch.from_numpy(rows)]).abs()
    assert float(moved.max()) <= 0.1 + 1e-7  # float32 rounding of x + 0.1 and back


@pytest.mark.parametrize("kind, levels", [("noise", [32, 128]), ("fgsm", [0.01, 0.1])])
def test_h_is_chosen_on_fresh_sets(tiny, kind, levels):
    """phi*_h maximises Eq. 3 on the stage-0 sets; l_hat(phi*_h | h) is Eq. 3 recomputed on
    the stage-1 sets; h* is the first argmax of l_hat; the detector is fitted on fit."""
    model, fit, id_val, _ = tiny
    key = "sigmas" if kind == "noise" else "eps"
    result = oodbench.tune("react", {"percentile": [60.0, 90.0]}, id_val, None, fit=fit,
                           model=model, protocol=kind, settings={key: levels, "n_sets": 2, "seed": 1})
    config = Synthetic(kind=kind, levels=tuple(float(v) for v in levels), n_sets=2, seed=1)
    mean, std, pixels = _pixels(model, id_val, config)
    correct = np.asarray(id_val.correct)
    per_h = result.provenance["per_h"]

    def eq3(point, index, stage):
        det = create("react", **point).fit(fit)
        s_id = det.score(id_val)
        values = []
        for rows, images in set_images(model, np.asarray(id_val.labels), config, index, stage,
                                       mean, std, pixels):
            s_ood = det.score(synthetic.activations_of(model, images, mean, std, "x"))
            values.append(metrics.evaluate(s_id[rows], s_ood, id_correct=correct[rows])["auroc"])
        return float(np.mean(values))

    for index, entry in enumerate(per_h):
        search = {p: eq3({"percentile": p}, index, 0) for p in (60.0, 90.0)}
        assert entry["best_params"]["percentile"] == max(search, key=search.get)
        assert entry["validation"] == pytest.approx(eq3(entry["best_params"], index, 1), rel=1e-12)
    validations = [e["validation"] for e in per_h]
    assert result.provenance["h_star"] == per_h[int(np.argmax(validations))]["h"]
    assert result.best_params == per_h[int(np.argmax(validations))]["best_params"]


def test_disjoint_draws_share_no_index(tiny):
    """With disjoint_draws, the search's and the fresh sets' rows come from two halves of each
    pool: no row in both (simulated ID and OOD alike); without it they overlap."""
    _, fit, id_val, _ = tiny
    variant = Variant(index=0, kept=np.array([0, 1]), withheld=np.array([2, 3]), fit=fit,
                      id_val=id_val.subset(np.arange(20)), ood=fit.subset(np.arange(30)),
                      from_cache=False)
    for disjoint in (True, False):
        a = paper_sets(variant, 2, 5, 4, 0, disjoint)
        b = paper_sets(variant, 2, 5, 4, 1, disjoint)
        for side in (0, 1):
            first = set(np.concatenate([s[side] for s in a]).tolist())
            second = set(np.concatenate([s[side] for s in b]).tolist())
            assert (not first & second) if disjoint else bool(first & second)
        if disjoint:
            assert all(len(s[0]) == 10 and len(s[1]) == 10 for s in a + b)  # k = half a pool
    for disjoint in (True, False):
        first = {int(r) for j in range(4) for r in synthetic.draw_rows(24, 5, 0, j, 0, disjoint)[0]}
        second = {int(r) for j in range(4) for r in synthetic.draw_rows(24, 5, 0, j, 1, disjoint)[0]}
        assert (not first & second) if disjoint else bool(first & second)


@pytest.mark.parametrize("protocol, settings, message", [
    ("noise", {"sigmas": [0]}, "sigmas must be a non-empty list, each > 0"),
    ("noise", {"sigmas": [-32]}, "sigmas must be a non-empty list, each > 0"),
    ("noise", {"sigmas": "32"}, "sigmas must be a non-empty list"),
    ("noise", {"sigmas": []}, "sigmas must be a non-empty list"),
    ("fgsm", {"eps": [0.0]}, r"eps must be a non-empty list, each in \(0, 1\]"),
    ("fgsm", {"eps": [1.5]}, r"eps must be a non-empty list, each in \(0, 1\]"),
    ("fgsm", {"eps": [float("nan")]}, r"eps must be a non-empty list, each in \(0, 1\]"),
    ("fgsm", {"n_sets": 0}, "n_sets"),
    ("noise", {"disjoint_draws": "yes"}, "disjoint_draws must be True or False"),
    ("fgsm", {"sigmas": [32]}, "unknown setting"),
])
def test_bad_settings_fail_before_any_work(tiny, monkeypatch, protocol, settings, message):
    model, fit, id_val, _ = tiny
    for name in ("id_pixels", "fgsm", "noise_images"):
        monkeypatch.setattr(synthetic, name, lambda *a, **k: pytest.fail("worked"))
    with pytest.raises(InvalidInputError, match=message) as err:
        oodbench.tune("react", {"percentile": Range(50.0, 99.0)}, id_val, None, fit=fit,
                      model=model, protocol=protocol, search="tpe", n_trials=2, settings=settings)
    assert "\n" not in str(err.value)


def test_the_protocols_need_the_model(tiny):
    _, fit, id_val, _ = tiny
    with pytest.raises(InvalidInputError, match="model=classifier"):
        oodbench.tune("react", {"percentile": [90.0]}, id_val, None, fit=fit, protocol="fgsm")


@pytest.mark.parametrize("table, message", [
    ({"protocol": "noise", "space": "paper", "sigmas": [0]}, "each > 0"),
    ({"protocol": "fgsm", "space": "paper", "eps": [2.0]}, r"\(0, 1\]"),
    ({"protocol": "held_out_paper", "space": "paper", "retrain": "scratch",
      "train": {"recipe": "cpu-resnt9"}}, "unknown recipe"),
    ({"protocol": "held_out_paper", "space": "paper", "disjoint_draws": 1}, "True or False"),
])
def test_experiment_tune_tables_check_the_new_options(table, message):
    """The experiment file's tune table validates the new keys when it is read."""
    with pytest.raises(ConfigError, match=message):
        parse(TuneSpec, table, file="experiment.toml")


def test_experiment_tune_tables_accept_the_new_options():
    spec = parse(TuneSpec, {"protocol": "fgsm", "space": "paper", "eps": [0.01], "n_sets": 3,
                            "disjoint_draws": True, "seed": 4}, file="experiment.toml")
    assert spec.protocol_settings == {"eps": (0.01,), "n_sets": 3, "disjoint_draws": True, "seed": 4}
    held = parse(TuneSpec, {"protocol": "held_out_paper", "space": "paper", "retrain": "scratch",
                            "train": {"recipe": "cpu-resnet9"}, "disjoint_draws": True},
                 file="experiment.toml")
    assert held.protocol_settings["retrain"] == "scratch"
