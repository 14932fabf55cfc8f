"""train_head: the frozen-feature fast path."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch
from scipy.optimize import minimize

from oodbench import detectors
from oodbench.errors import ClassCountMismatchError, InvalidInputError, UnknownNameError
from oodbench.extract.activations import Activations
from oodbench.train import train_head
from oodbench.train.optim import HEAD, DeprecatedArgumentWarning


def blobs(n_per_class=60, d=5, c=3, seed=0, shift=0.0):
    rng = np.random.default_rng(seed)
    centres = rng.normal(scale=3.0, size=(c, d))
    feats = np.concatenate([centres[k] + shift + rng.normal(size=(n_per_class, d)) for k in range(c)])
    labels = np.repeat(np.arange(c), n_per_class)
    logits = np.zeros((len(labels), c), dtype=np.float32)  # the old head: irrelevant here
    return Activations(logits=logits, labels=labels, ids=np.arange(len(labels)).astype(str),
                       features=feats.astype(np.float32), meta={"model": "blobs"})


def test_full_batch_training_reaches_the_convex_optimum():
    """Full-batch SGD, constant lr, many epochs: the unique minimiser of mean CE + wd/2 |theta|^2
    (weight decay on weight and bias, as torch applies it), found independently by L-BFGS."""
    acts = blobs()
    wd = 0.05
    res = train_head(acts, optim=replace(HEAD, epochs=400, batch_size=len(acts), lr=0.5,
                                         weight_decay=wd, schedule="constant"), device="cpu")
    x = acts.features.astype(np.float64)
    y = acts.labels
    c, d = 3, x.shape[1]

    def objective(theta):
        w, b = theta[: c * d].reshape(c, d), theta[c * d :]
        z = x @ w.T + b
        m = z.max(axis=1, keepdims=True)
        lse = (m + np.log(np.exp(z - m).sum(axis=1, keepdims=True)))[:, 0]
        return (lse - z[np.arange(len(y)), y]).mean() + 0.5 * wd * (theta**2).sum()

    best = minimize(objective, np.zeros(c * d + c), method="L-BFGS-B", options={"gtol": 1e-10})
    # a convergence tolerance, not a rounding one: 400 float32 SGD epochs end ~6e-5 from the
    # optimum here; 2e-3 is < 1% of the weights (size ~0.5) and far below a wrong objective
    np.testing.assert_allclose(res.weight, best.x[: c * d].reshape(c, d), atol=2e-3)
    np.testing.assert_allclose(res.bias, best.x[c * d :], atol=2e-3)
    assert res.history[-1] <= res.history[0]


def test_seeded_and_deterministic_on_cpu():
    acts = blobs()
    optim = replace(HEAD, epochs=3, batch_size=32)
    a = train_head(acts, optim=optim, seed=1, device="cpu")
    b = train_head(acts, optim=optim, seed=1, device="cpu")
    c = train_head(acts, optim=optim, seed=2, device="cpu")
    # two runs of one seed in this process: the same ops in the same order, the same bits
    np.testing.assert_array_equal(a.weight, b.weight)
    assert a.history == b.history
    assert not np.array_equal(a.weight, c.weight)


def test_apply_gives_the_new_head_and_reindexed_labels():
    acts = blobs(c=4)
    res = train_head(acts, classes=[3, 1], optim=replace(HEAD, epochs=5), device="cpu")
    assert res.weight.shape == (2, 5) and res.classes.tolist() == [3, 1]
    assert res.config["n_train"] == 120  # only the rows of classes 3 and 1
    out = res.apply(acts)
    # HeadResult.logits is this very NumPy expression: the same bits here and on any CPU
    np.testing.assert_allclose(out.logits, acts.features @ res.weight.T + res.bias, rtol=1e-6)
    expected = np.select([acts.labels == 3, acts.labels == 1], [0, 1], -1)
    np.testing.assert_array_equal(out.labels, expected)
    assert out.head_weight is res.weight and out.meta["restricted_classes"] == [3, 1]
    scores = detectors.create("msp").score(out)  # any detector runs on it unchanged
    vim = detectors.create("vim", dim=2).fit(res.apply(acts.subset(acts.labels != 0)))
    assert scores.shape == (len(acts),) and np.isfinite(vim.score(out)).all()
    assert (out.predictions[out.labels >= 0] == out.labels[out.labels >= 0]).mean() > 0.9


@pytest.mark.parametrize("loss", ["ce", "logitnorm", "hem", "mm", "dice"])
def test_every_loss_learns_the_blobs(loss):
    acts = blobs()
    res = train_head(acts, loss=loss, optim=replace(HEAD, epochs=20, batch_size=32, lr=0.05),
                     device="cpu")
    out = res.apply(acts)
    assert (out.predictions == out.labels).mean() > 0.9, loss


def test_outlier_exposure_flattens_outlier_softmax():
    acts = blobs(seed=0)
    far = blobs(seed=0, shift=8.0)  # the same blobs moved away: outliers
    kwargs = {"optim": replace(HEAD, epochs=20, batch_size=32, lr=0.05), "device": "cpu"}
    ce = train_head(acts, loss="ce", **kwargs)
    oe = train_head(acts, loss="oe", outliers=far, **kwargs)
    msp = detectors.create("msp")
    assert msp.score(oe.apply(far)).mean() < msp.score(ce.apply(far)).mean()
    assert oe.config["n_outliers"] == len(far) and oe.config["outlier_batch_size"] == 64


def test_mos_head_has_one_others_output_per_group():
    acts = blobs(c=4)
    res = train_head(acts, loss="mos", loss_options={"groups": [[0, 2], [1, 3]]},
                     optim=replace(HEAD, epochs=5), device="cpu")
    assert res.weight.shape == (6, 5)
    out = res.apply(acts)
    assert out.meta["mos_groups"] == [[0, 2], [1, 3]]
    assert np.isfinite(detectors.create("mos").score(out)).all()


def test_bad_input_is_reported_before_training():
    acts = blobs()
    with pytest.raises(UnknownNameError, match="unknown loss 'logit_norm'"):
        train_head(acts, loss="logit_norm")
    with pytest.raises(InvalidInputError, match="needs outlier activations"):
        train_head(acts, loss="oe")
    with pytest.raises(ClassCountMismatchError, match="label 2 lies outside the head's 2 classes"):
        train_head(acts, num_classes=2)
    with pytest.raises(InvalidInputError, match="warmup_epochs"):
        train_head(acts, optim=replace(HEAD, epochs=2, warmup_epochs=2))
    no_features = Activations(logits=acts.logits, labels=acts.labels, ids=acts.ids)
    with pytest.raises(KeyError, match="features"):
        train_head(no_features)
    res = train_head(acts, optim=replace(HEAD, epochs=1), device="cpu")
    other = blobs(d=7)
    with pytest.raises(ClassCountMismatchError, match="5-dimensional"):
        res.apply(other)


def test_classes_without_rows_are_refused_and_few_rows_warned():
    """Issue 23 item 8: classes=[0, 1, 2] on rows with one row of class 1 and none of 0 or 2
    trained without a word."""
    from oodbench.errors import EmptyInputError
    from oodbench.train.labels import FewRowsWarning

    acts = blobs(c=4)
    keep = np.flatnonzero(acts.labels == 3)[:5].tolist() + [int(np.flatnonzero(acts.labels == 1)[0])]
    sparse = acts.subset(np.array(keep))
    with pytest.raises(EmptyInputError, match=r"2 of the 3 chosen classes have no row.*\[0, 2\]"):
        train_head(sparse, loss="logitnorm", classes=[0, 1, 2], optim=replace(HEAD, epochs=1))
    with pytest.warns(FewRowsWarning, match=r"1 of the 2 chosen classes have fewer than 2 rows \(\[1\]\)"):
        train_head(sparse, loss="logitnorm", classes=[1, 3], optim=replace(HEAD, epochs=1))
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error", FewRowsWarning)
        train_head(acts, classes=[0, 1, 2], optim=replace(HEAD, epochs=1))  # enough rows of each: no warning


def test_warmup_and_cosine_schedule_values():
    from oodbench.train.optim import lr_factor

    assert [lr_factor(s, 10, 2, "cosine") for s in (0, 1)] == [0.5, 1.0]
    assert lr_factor(2, 10, 2, "cosine") == 1.0
    np.testing.assert_allclose(lr_factor(6, 10, 2, "cosine"), 0.5)  # (1 + cos(pi/2)) / 2: ~1e-17
    assert lr_factor(5, 10, 0, "constant") == 1.0
    assert torch.__version__  # torch is importable alongside (no state leaks)


def test_old_optimiser_keywords_still_work_with_a_warning():
    """Issue 20: the flat keywords (``epochs=``, ``lr=``, ...) change HEAD, with a warning, and
    train exactly what ``optim=`` does; a typo is a TypeError naming the right keyword."""
    acts = blobs()
    new = train_head(acts, optim=replace(HEAD, epochs=3, lr=0.05), seed=1, device="cpu")
    with pytest.warns(DeprecatedArgumentWarning, match=r"train_head\(epochs=3, lr=0.05\) is "
                      r"deprecated; pass optim=OptimSettings\(epochs=3, lr=0.05\)"):
        old = train_head(acts, epochs=3, lr=0.05, seed=1, device="cpu")
    np.testing.assert_array_equal(old.weight, new.weight)  # one seed, one code path, this process
    assert old.config == {**new.config, "seconds": old.config["seconds"]}
    with pytest.raises(TypeError, match="unexpected keyword argument 'epoch'.*'epochs'"):
        train_head(acts, epoch=3)
    with pytest.raises(InvalidInputError, match="give the optimiser settings once"):
        train_head(acts, optim=HEAD, epochs=3)
