import numpy as np
import pytest
import scipy.special
import torch

from oodbench.detectors import NotFittedError, create
from oodbench.errors import InvalidInputError
from tests._tolerance import assert_within
from tests.detectors._reference import pod, tensor


def _closed_form(train_logits: np.ndarray, logits: np.ndarray) -> np.ndarray:
    p_train = scipy.special.softmax(train_logits.astype(np.float64), axis=1)
    pred = p_train.argmax(axis=1)
    templates = [p_train[pred == k].mean(axis=0) for k in np.unique(pred)]
    p = scipy.special.softmax(logits.astype(np.float64), axis=1)
    kl = np.array([[scipy.special.rel_entr(row, d).sum() for d in templates] for row in p])
    return -kl.min(axis=1)


def test_matches_pytorch_ood(id_train, id_test, ood_test):
    det = create("klm").fit(id_val=id_train)
    ref = pod().KLMatching(None).fit_logits(tensor(id_train.logits), tensor(id_train.labels, None))
    for acts in (id_test, ood_test):
        # pytorch-ood's float64 KL and templates (other sums): float64 rounding apart
        ref_scores = -ref.predict_logits(tensor(acts.logits)).numpy()
        assert_within(det.score(acts), ref_scores, _rounding(det, acts, id_train))


def test_closed_form(id_train, id_test, ood_test):
    det = create("klm").fit(id_val=id_train)
    for acts in (id_test, ood_test):  # float64 both: kappa near 0 needs the absolute bound
        assert_within(det.score(acts), _closed_form(id_train.logits, acts.logits),
                      _rounding(det, acts, id_train))


def test_only_predicted_classes_have_templates(make_acts, id_test):
    train = make_acts(200, 10, 32, seed=5)
    train.logits[:, 3] = -50.0  # class 3 is never predicted
    with pytest.warns(UserWarning, match="1 of 10 classes are never predicted"):
        det = create("klm").fit(id_val=train)
    assert 3 not in det.template_classes_
    assert len(det.template_classes_) == len(np.unique(train.predictions))
    assert_within(det.score(id_test), _closed_form(train.logits, id_test.logits),
                  _rounding(det, id_test, train))


def test_kl_to_own_template_is_zero(make_acts):
    """A sample whose softmax equals its class template has KL 0: kappa = 0, the maximum."""
    train = make_acts(1, 4, 3)
    with pytest.warns(UserWarning, match="3 of 4 classes"):
        det = create("klm").fit(id_val=train)
    # cross and neg_entropy (sizes ~1) cancel to 0 up to ~1e-15 of float64 rounding
    np.testing.assert_allclose(det.score(train), [0.0], atol=1e-12)


def test_needs_fit(id_test):
    with pytest.raises(NotFittedError):
        create("klm").score(id_test)


def test_fits_on_id_val_by_default(id_train, id_test):
    """The paper's (and OpenOOD's) protocol: templates from held-out ID data; the training set
    only when asked for."""
    assert create("klm").fit_data == "id_val"
    with pytest.raises(InvalidInputError, match="held-out ID validation activations"):
        create("klm").fit(id_train)
    on_train = create("klm", fit_data="train").fit(id_train, id_val=None)
    # the same fit rows through the same code in this process: the same bits
    np.testing.assert_array_equal(on_train.score(id_test), create("klm").fit(None, id_val=id_train).score(id_test))


def _all_float64(det, acts) -> np.ndarray:
    """KLM's score with the cross term as one float64 product (no float32 screen)."""
    from oodbench.detectors._math import log_softmax

    log_p = log_softmax(acts.logits)
    p = log_p.exp()
    cross = (p @ det.log_templates_.T).max(dim=1).values
    return (cross - (p * log_p).sum(dim=1)).numpy()


def _rounding(det, acts, fit=None) -> np.ndarray:
    """Per row, how far two float64 computations of kappa may differ (another reduction order,
    another exp kernel): kappa is ``cross - neg_entropy``, each a sum of same-signed terms
    (``p_c log d_kc <= 0``, ``p_c log p_c <= 0``), so each part is off by at most its own size
    times the relative error of its terms: ``p_c`` carries the exp's ``ULPS``, the rounding of
    ``z_c - max z`` (``|log p_c|`` ulps at most) and of the normaliser (``C + 1``), and each sum
    ``gamma(C)``. The two parts may cancel (kappa near 0): the bound is on their sizes. With
    ``fit`` (a reference that fits its own templates), each template entry, a mean of ``n``
    fit softmaxes, may differ by ``gamma(n)`` and its terms' error relative, which moves
    ``cross`` (``sum_c p_c = 1``) by as much absolute."""
    from tests._tolerance import U64, ULPS

    def softmax_units(logits):
        log_p = torch.log_softmax(torch.as_tensor(np.asarray(logits, np.float64)), dim=1)
        return log_p, 2 * ULPS + 3 * log_p.abs().amax(dim=1) + log_p.shape[1] + 2

    log_p, units = softmax_units(acts.logits)
    p = log_p.exp()
    cross = (p @ det.log_templates_.T).max(dim=1).values.abs()
    neg_entropy = (p * log_p).sum(dim=1).abs()
    bound = (units + p.shape[1]) * U64 * (cross + neg_entropy)
    if fit is not None:
        fit_log_p, fit_units = softmax_units(fit.logits)
        rows = np.bincount(fit_log_p.argmax(dim=1).numpy()).max()
        bound = bound + (rows + float(fit_units.max())) * U64
    return 2 * bound.numpy()  # twice: both computations


def _candidates(det, acts) -> torch.Tensor:
    """How many templates pass KLM's float32 screen on each row; checks on the way that they
    include every template the exact test ``a_k + slack_k >= max_j (a_j - slack_j)`` keeps
    (the float32 products' rounding bound, recomputed here from the module docstring)."""
    from oodbench.detectors import klm
    from oodbench.detectors._math import log_softmax

    p = log_softmax(acts.logits).exp()
    screened = klm._screened(p, klm._float32_screen(det.log_templates_))[0]
    logs = det.log_templates_
    slack = 2.0 * (logs.shape[1] + 3) * 2.0**-24 * logs.abs().amax(dim=1)
    approx = (p.float() @ logs.float().T).double()
    exact = approx + slack >= (approx - slack).amax(dim=1, keepdim=True)
    assert not (exact & ~screened).any(), "the screen dropped a template that can hold the maximum"
    return screened.sum(dim=1)


@pytest.mark.filterwarnings("ignore:detector 'klm'")
def test_float32_screen_gives_the_float64_maximum(make_acts):
    """The screen keeps only the templates that can hold the maximum, then takes it in float64:
    the scores equal the all-float64 product's, on confident and on flat softmaxes, and when
    the templates are so alike that the rows fall back to the full product."""
    from oodbench.detectors import klm

    train = make_acts(3000, 60, 16, seed=7)
    test = make_acts(400, 60, 16, seed=8)
    test.logits[:100] *= 0.01  # flat softmaxes
    test.logits[100:200] *= 0.3
    det = create("klm").fit(id_val=train)
    assert _candidates(det, test).max() < klm._MAX_CANDIDATES  # screened rows only
    assert_within(det.score(test), _all_float64(det, test), _rounding(det, test))
    train.logits *= 1e-6  # near-uniform templates, all within the slack of each other
    alike = create("klm").fit(id_val=train)
    assert _candidates(alike, test).min() > klm._MAX_CANDIDATES  # the full float64 product
    assert_within(alike.score(test), _all_float64(alike, test), _rounding(alike, test))
    mixed = create("klm").fit(id_val=train)
    distinct = len(mixed.log_templates_) - klm._MAX_CANDIDATES - 2  # the rest stay alike
    assert distinct > 0
    mixed.log_templates_[:distinct] = det.log_templates_[:distinct]  # both paths in one score
    counts = _candidates(mixed, test)
    assert counts.min() <= klm._MAX_CANDIDATES < counts.max()
    assert_within(mixed.score(test), _all_float64(mixed, test), _rounding(mixed, test))


def test_float32_screen_keeps_templates_float32_cannot_hold(make_acts):
    """A template entry that underflowed (log floored to the most negative float64) cannot be
    screened in float32: that template is always a candidate, and the scores stay exact."""
    from oodbench.detectors import klm

    train = make_acts(800, 12, 16, seed=3)
    det = create("klm").fit(id_val=train)
    det.log_templates_[2, 5] = torch.finfo(torch.float64).min
    screen = klm._float32_screen(det.log_templates_)
    assert screen.always.tolist() == [2] and torch.isfinite(screen.narrow).all()
    test = make_acts(300, 12, 16, seed=4)
    assert_within(det.score(test), _all_float64(det, test), _rounding(det, test))


def test_no_float32_screen_when_products_may_run_in_lower_precision(id_train, id_test):
    from oodbench.detectors import klm

    det = create("klm").fit(id_val=id_train)
    before = torch.get_float32_matmul_precision()
    try:
        torch.set_float32_matmul_precision("medium")
        assert klm._float32_screen(det.log_templates_) is None
        # the same float64 maths in another order: 1e-13 relative is not enough where kappa
        # is small (-0.002 = cross - neg_entropy of sizes ~1 differed by 2.2e-16 on one CPU)
        assert_within(det.score(id_test), _all_float64(det, id_test), _rounding(det, id_test))
    finally:
        torch.set_float32_matmul_precision(before)
