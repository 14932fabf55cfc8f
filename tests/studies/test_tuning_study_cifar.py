"""The CIFAR-scale tuning study's per-claim rules (studies/tuning_study_cifar.py) on
hand-made rows: a difference counts only outside the other row's mean DeLong interval."""

import pytest

from tests._scripts import load_script


@pytest.fixture(scope="module")
def study():
    return load_script("studies/tuning_study_cifar.py")


def _row(label, protocol, seed, auroc, half=0.02):
    return {"detector": label, "protocol": protocol, "seed": seed,
            **{f"{g}_auroc": auroc for g in ("near", "far")},
            **{f"{g}_ci": [auroc - half, auroc + half] for g in ("near", "far")}}


def _rows(scratch, others):
    """Two seeds per (label, protocol); ``scratch[label]`` and ``others[protocol]`` AUROCs."""
    rows = []
    for label in ("ASH", "ReAct", "VRA", "KNN", "PLF"):
        for seed in (0, 1):
            rows.append(_row(label, "scratch", seed, scratch[label]))
            for protocol, value in others.items():
                rows.append(_row(label, protocol, seed, value))
    return rows


def test_claims_follow_the_fixed_rules(study):
    scratch = {"ASH": 0.80, "ReAct": 0.80, "KNN": 0.80, "VRA": 0.90, "PLF": 0.86}
    rows = _rows(scratch, {"ood_val": 0.81, "noise": 0.79, "fgsm": 0.70})
    sentences = study.claims(rows, [0, 1])
    assert len(sentences) == 6  # 3 claims x (near, far)
    near_val, _, near_base, _, near_gain, _ = sentences
    # within OOD-val's interval [0.79, 0.83] -> holds; above it -> holds; none below
    assert "ASH: holds (80.00 vs 81.00)" in near_val and "does not hold" not in near_val
    # 0.80 lies inside noise's interval [0.77, 0.81]: not resolved; 0.86, 0.90 above both
    assert "ASH: not resolved at this scale" in near_base
    assert "VRA: holds" in near_base and "PLF: holds" in near_base
    # gains over the best baseline (noise 0.79): VRA 11, PLF 7 > ASH = ReAct = KNN 1
    assert "holds (gains in points: VRA+ 11.00, PLF 7.00; ASH-B 1.00" in near_gain


def test_claims_say_not_run_for_missing_seeds(study):
    rows = [r for r in _rows({k: 0.8 for k in ("ASH", "ReAct", "VRA", "KNN", "PLF")},
                             {"ood_val": 0.7, "noise": 0.9, "fgsm": 0.9}) if r["seed"] == 0]
    sentences = study.claims(rows, [0, 1])
    assert all("not run" in s for s in sentences)
    full = study.claims(rows, [0])
    assert "ASH: holds (80.00 vs 70.00)" in full[0]
    assert "ASH: does not hold" in full[2]  # below both baselines' intervals
