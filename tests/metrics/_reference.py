"""Independent references for the metric tests: scikit-learn, brute force, and random cases."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
from scipy.stats import rankdata
from sklearn import metrics as skm

# values that stress exact tie detection and ordering: signed zeros, subnormals, neighbours of
# huge magnitudes, infinities
EXTREMES = np.array(
    [
        -np.inf,
        -1e300,
        np.nextafter(-1e300, 0),
        -1.0,
        -5e-324,
        -0.0,
        0.0,
        5e-324,
        1e-300,
        1.0,
        np.nextafter(1.0, 2),
        1e300,
        np.nextafter(1e300, np.inf),
        np.finfo(np.float64).max,
        np.inf,
    ]
)
ID_FRACTIONS = (0.001, 0.01, 0.1, 0.5, 0.9, 0.99, 0.999)


def random_case(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """ID and OOD float64 scores: sizes 2..20k (log-uniform), ID share 0.1 %..99.9 %, and one of
    continuous, integer (heavy ties), fp16-rounded, extreme-magnitude or separated scores."""
    n = int(np.exp(rng.uniform(np.log(2), np.log(20_000))))
    frac = rng.choice(ID_FRACTIONS) if rng.random() < 0.5 else rng.uniform(0, 1)
    n_id = min(max(1, round(frac * n)), n - 1)
    n_ood = n - n_id
    kind = rng.integers(5)
    if kind == 0:  # continuous, overlapping
        shift = rng.uniform(-1, 3)
        return rng.normal(shift, 1, n_id), rng.normal(0, 1, n_ood)
    if kind == 1:  # integers: heavy ties
        k = int(rng.choice([1, 2, 3, 10, 100]))
        return rng.integers(0, k, n_id).astype(float), rng.integers(-1, k - 1, n_ood).astype(float)
    if kind == 2:  # fp16 rounding
        return (
            rng.normal(1, 1, n_id).astype(np.float16).astype(float),
            rng.normal(0, 1, n_ood).astype(np.float16).astype(float),
        )
    if kind == 3:  # extreme magnitudes
        return rng.choice(EXTREMES[5:], n_id), rng.choice(EXTREMES[:-3], n_ood)
    low, high = rng.normal(0, 1, n_id), rng.normal(0, 1, n_ood) - 10  # separated
    return (low, high) if rng.random() < 0.5 else (high, low)


def sklearn_ready(id_scores: np.ndarray, ood_scores: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``y`` (1 = ID) and scores for scikit-learn, which refuses ±inf: then the pooled scores are
    replaced by their dense ranks, a strictly increasing map that keeps every tie."""
    scores = np.concatenate([id_scores, ood_scores])
    if not np.isfinite(scores).all():
        scores = rankdata(scores, method="dense").astype(np.float64)
    y = np.concatenate([np.ones(id_scores.size), np.zeros(ood_scores.size)]).astype(int)
    return y, scores


def _fpr_at(y: np.ndarray, s: np.ndarray, tpr: float) -> float:
    fpr, tpr_curve, _ = skm.roc_curve(y, s, drop_intermediate=False)
    return float(fpr[np.argmax(tpr_curve >= tpr)])


def sklearn_metrics(id_scores: np.ndarray, ood_scores: np.ndarray, tpr: float = 0.95) -> dict:
    """Every metric of :func:`oodbench.metrics.evaluate`, by scikit-learn (OpenOOD's recipe)."""
    y, s = sklearn_ready(id_scores, ood_scores)
    p_in, r_in, _ = skm.precision_recall_curve(y, s)
    p_out, r_out, _ = skm.precision_recall_curve(1 - y, -s)
    return {
        "auroc": skm.roc_auc_score(y, s),
        "fpr_id": _fpr_at(y, s, tpr),
        "fpr_ood": _fpr_at(1 - y, -s, tpr),
        "aupr_in": skm.auc(r_in, p_in),
        "aupr_out": skm.auc(r_out, p_out),
        "ap_in": skm.average_precision_score(y, s),
        "ap_out": skm.average_precision_score(1 - y, -s),
    }


def brute_force(id_scores, ood_scores, tpr: Fraction = Fraction(95, 100)) -> dict[str, Fraction]:
    """Exact metrics from their definitions, with Fractions and plain loops (small inputs only).

    AUROC counts all pairs; the curves test every distinct threshold t from the strict end
    (ID positive: accept s >= t; OOD positive: flag s <= t).
    """
    ids, oods = [Fraction(x) for x in id_scores], [Fraction(x) for x in ood_scores]
    pairs = sum(
        Fraction(1) if a > b else Fraction(1, 2) if a == b else 0 for a in ids for b in oods
    )
    out = {"auroc": pairs / (len(ids) * len(oods))}
    for name, pos, neg, accept in (
        ("id", ids, oods, lambda s, t: s >= t),
        ("ood", oods, ids, lambda s, t: s <= t),
    ):
        points = []  # (recall, fpr, precision) from the strict end
        for t in sorted(set(ids + oods), reverse=name == "id"):
            tp = sum(1 for s in pos if accept(s, t))
            fp = sum(1 for s in neg if accept(s, t))
            points.append((Fraction(tp, len(pos)), Fraction(fp, len(neg)), Fraction(tp, tp + fp)))
        out[f"fpr_{name}"] = next(f for r, f, _ in points if r >= tpr)
        curve = [(Fraction(0), Fraction(1))] + [(r, p) for r, _, p in points]
        out[f"aupr_{'in' if name == 'id' else 'out'}"] = sum(
            (r1 - r0) * (p0 + p1) / 2 for (r0, p0), (r1, p1) in zip(curve, curve[1:])
        )
        out[f"ap_{'in' if name == 'id' else 'out'}"] = sum(
            (r1 - r0) * p1 for (r0, _), (r1, p1) in zip(curve, curve[1:])
        )
    return out
