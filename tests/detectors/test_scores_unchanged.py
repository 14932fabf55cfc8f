"""Every detector's scores are pinned: a change of any score fails here.

``golden_scores.npz`` holds the scores every array-only detector (defaults of ``create(name)``)
gave on fixed synthetic activations (``pinned_activations``: 12 classes, 48 features, a 3 x 3
feature map; fitted on 600 ID rows, 300 ID validation rows, scoring 200 ID + 200 OOD rows) on
the NumPy path. The inputs are checked too (a digest), so a change of NumPy's random streams
reads as such and not as a detector change; they are the same bits on every CPU (the logits
are summed in NumPy's fixed order, not by BLAS: ``make_activations``).

The scores are not: the pinned ones come from one machine, and another CPU's vector kernels,
BLAS and LAPACK sum in other orders (on one machine, with AVX2 or no vector kernels in torch
and another OpenBLAS kernel, ViM's scores moved by 1.4e-7 of its score scale, 8e-4 relative
where a score crosses zero). So each detector gets 2e-6 relative plus an absolute floor
relative to its score scale ``max |score|``: for the detectors that work in float32 somewhere
(head products and projections of the 48 features, exps), ``2 gamma(49)`` in float32 (the
rounding bound of a 49-term sum, twice for the two machines: 5.8e-6 of the scale); for those
in float64 from the first step (``FLOAT64_ONLY``), 1e-9 of the scale (float64 rounding, through
whitenings of condition number up to ~40 here, moved them by at most 1.2e-14 of the scale, in
the same experiment). A change of a formula,
a default, a threshold or a chunking that alters what is computed moves scores by far more.

A detector changed on purpose (a corrected formula, a new default) updates its entry, and says
why in its commit:

    PYTHONPATH=src python tests/detectors/test_scores_unchanged.py NAME [NAME ...]

A new detector adds its entry the same way; a detector that cannot run from these arrays goes
into ``NOT_FROM_ARRAYS`` with the reason.

The second test is the guarantee of ``compute.Backend.run_chunks``: the chunks spread over
single-threaded workers give the same scores, to the last bit, as one thread going through
them in order.
"""

from __future__ import annotations

import hashlib
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

from oodbench import compute
from oodbench.detectors import available, create
from oodbench.detectors._stats import LargeKWarning
from oodbench.extract.activations import Activations
from tests._tolerance import U32, gamma

GOLDEN = Path(__file__).with_name("golden_scores.npz")
#: detectors that need what arrays cannot give (the live network, a CLIP text encoder)
NOT_FROM_ARRAYS = {"model": "runs the live network", "text_embeddings": "needs CLIP text embeddings"}
#: hyper-parameters without a default that a detector needs here
REQUIRED_OPTIONS = {"mos": {"groups": [[0, 1, 2, 3, 4], [5, 6, 7, 8, 9]]}}  # 10 classes + 2 "others"
RTOL = 2e-6
#: detectors with no float32 arithmetic between the activations and the score (float64 from the
#: first step, or a selection such as maxlogit's): only float64 rounding differs between CPUs
FLOAT64_ONLY = frozenset({"dml", "gradnorm", "klm", "mahalanobis", "maxcosine", "maxlogit",
                          "maxnorm", "mcm", "mos", "rmd", "rp_gradnorm", "rp_msp", "she"})
#: the pinned model's feature dimension: the longest float32 sum is a 48-term product + bias
FEATURES = 48
#: the fit banks are small (600 rows): KNN's and NNGuide's default k are a large share of them
pytestmark = pytest.mark.filterwarnings("ignore::oodbench.detectors._stats.LargeKWarning")


def pinned_activations() -> tuple[Activations, Activations, Activations]:
    """(train, id_val, test): fixed synthetic activations of one 12-class, 48-feature model."""
    from tests.detectors.conftest import make_activations

    def one(n: int, seed: int, ood: bool = False) -> Activations:
        return make_activations(n, 12, 48, seed=seed, ood=ood, feature_map=(3, 3))

    train, id_val = one(600, 0), one(300, 3)
    test = Activations.concatenate([one(200, 1), one(200, 2, ood=True)])
    test.head_weight, test.head_bias = train.head_weight, train.head_bias
    return train, id_val, test


def digest(*sets: Activations) -> str:
    """SHA-256 of every array the detectors read."""
    h = hashlib.sha256()
    for acts in sets:
        for name in ("logits", "labels", "features", "feature_map", "head_weight", "head_bias"):
            value = getattr(acts, name)
            if value is not None:
                h.update(np.ascontiguousarray(value).tobytes())
    return h.hexdigest()


def from_arrays() -> list[str]:
    """Every registered detector that runs from cached arrays."""
    return [d["name"] for d in available() if not NOT_FROM_ARRAYS.keys() & set(d["requires"])]


def scores(name: str, train: Activations, id_val: Activations, test: Activations) -> np.ndarray:
    det = create(name, **REQUIRED_OPTIONS.get(name, {}))
    fit = train if det.fits_on_data else None
    return det.fit(fit, id_val=id_val if det.fits_on_data else None).score(test)


@pytest.fixture(scope="module")
def pinned() -> tuple[Activations, Activations, Activations]:
    return pinned_activations()


@pytest.fixture(scope="module")
def golden() -> dict[str, np.ndarray]:
    with np.load(GOLDEN) as stored:
        return {key: stored[key] for key in stored.files}


def test_the_pinned_inputs_are_unchanged(pinned, golden):
    assert str(golden["__inputs_sha256__"]) == digest(*pinned), (
        "the synthetic inputs changed (NumPy's random streams or tests/detectors/conftest.py), "
        "not a detector: regenerate every entry (see the module docstring)"
    )


def test_every_detector_that_runs_from_arrays_is_pinned(golden):
    missing = sorted(set(from_arrays()) - set(golden))
    assert not missing, f"no pinned scores for {missing}: add them (see the module docstring)"


@pytest.mark.parametrize("name", from_arrays())
def test_scores_are_unchanged(name, pinned, golden):
    if name not in golden:
        pytest.fail(f"no pinned scores for {name!r}: add them (see the module docstring)")
    with compute.use("numpy"):
        got = scores(name, *pinned)
    expected = golden[name]
    np.testing.assert_allclose(got, expected, rtol=RTOL, atol=floor(name, expected),
                               err_msg=f"{name}'s scores changed")


def floor(name: str, expected: np.ndarray) -> float:
    """The absolute tolerance of ``name``'s scores on another CPU (see the module docstring)."""
    scale = float(np.max(np.abs(expected)))
    if name in FLOAT64_ONLY:
        return 1e-9 * scale
    return 2 * gamma(FEATURES + 1, U32) * scale


@pytest.mark.parametrize("name", from_arrays())
def test_chunks_on_workers_equal_one_thread_in_order(name, pinned):
    """Many small chunks, once over two single-threaded workers and once in order on one
    thread: bit-identical scores (the same ops on the same chunks on this machine, in this
    process: what differs between CPUs is the same in both)."""
    threads = torch.get_num_threads()
    try:
        with compute.use("numpy", chunk_bytes=4 * 48 * 37):
            torch.set_num_threads(2)
            on_workers = scores(name, *pinned)
            torch.set_num_threads(1)
            in_order = scores(name, *pinned)
    finally:
        torch.set_num_threads(threads)
    np.testing.assert_array_equal(on_workers, in_order)


def update(names: list[str]) -> None:
    """Write the scores of ``names`` (every detector from arrays when empty) into GOLDEN."""
    pinned = pinned_activations()
    stored = dict(np.load(GOLDEN)) if GOLDEN.exists() and names else {}
    with compute.use("numpy"), warnings.catch_warnings():
        warnings.simplefilter("ignore", LargeKWarning)
        for name in names or from_arrays():
            stored[name] = scores(name, *pinned)
            print(f"pinned {name}: {stored[name].shape[0]} scores")
    stored["__inputs_sha256__"] = np.array(digest(*pinned))
    np.savez_compressed(GOLDEN, **stored)


if __name__ == "__main__":
    update(sys.argv[1:])
