"""The demo data: digits split into ID fit/test and a held-out pool, real far-OOD patches."""

from __future__ import annotations

import numpy as np
import pytest

from oodbench.data.demo import KINDS, SOURCES, demo_data, noise, patches
from oodbench.errors import InvalidInputError, UnknownNameError


def test_sets_sizes_labels_and_split():
    data = demo_data(seed=0)
    fit, val, test = data.id_fit, data.id_val, data.id_test
    assert len(fit) + len(val) + len(test) == 1083  # sklearn's digits 0-5
    assert len(val) == pytest.approx(0.2 * 1083, abs=6)  # 20 % per class, rounded
    assert set(fit.indices) & set(test.indices) == set(val.indices) & (set(fit.indices) | set(test.indices)) == set()
    assert set(np.unique(fit.labels)) == set(range(6)) == set(np.unique(test.labels)) == set(np.unique(val.labels))
    assert len(data.pool) == 1797 - 1083 and set(np.unique(data.pool.labels)) == {0, 1, 2, 3}
    assert data.pool.class_names == ["6", "7", "8", "9"]
    np.testing.assert_array_equal(data.train_images, fit.parent.images[fit.indices][..., 0])
    for name in KINDS:
        images = data.ood[name].images
        assert images.shape == (300, 8, 8, 3) and (data.ood[name].labels == -1).all()
        assert images.min() == 0 and images.max() == 255  # stretched like the digits
    assert {n: len(data.source(n)) for n in SOURCES} == {
        "id_fit": len(fit), "id_val": len(val), "id_test": len(test), "pool": 714,
        **{k: 300 for k in KINDS}}
    with pytest.raises(UnknownNameError, match="Did you mean 'photos'"):
        data.source("photo")


def test_seeded():
    a, b = patches([np.arange(4096).reshape(64, 64) % 251], 5, seed=1), patches(
        [np.arange(4096).reshape(64, 64) % 251], 5, seed=1)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(noise(6, seed=1), noise(6, seed=2))
    assert not np.array_equal(demo_data(seed=1).id_fit.indices, demo_data(seed=0).id_fit.indices)


def test_bad_arguments():
    with pytest.raises(InvalidInputError, match="n_id_classes"):
        demo_data(n_id_classes=10)
    with pytest.raises(InvalidInputError, match="fit_fraction"):
        demo_data(fit_fraction=1.0)
    with pytest.raises(InvalidInputError, match="val_fraction"):
        demo_data(fit_fraction=0.6, val_fraction=0.4)
