"""The reference data of the test-side runs: EfficientNet-Lite0 on real ImageNet validation images
(ID) and CIFAR-10 test images (OOD), from ``../shared/data`` (its README says what each holds).

The seeded subsets are drawn as ``studies/real_detectors.py`` draws them (same seeds, same
rows), so the fidelity table and the real-detector run see the same images; the two are kept
apart because nothing in ``studies/`` may import from ``tests/`` nor the reverse.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from oodbench.data import ImageFolder
from oodbench.data.imagenet_val import ImageNetVal
from oodbench.data.source import Source
from oodbench.extract import extract
from oodbench.extract.activations import Activations

REPO = Path(__file__).resolve().parents[2]
DATA = REPO.parent / "shared" / "data"
#: what every run extracts (the feature map in float16: 1280x7x7 per image)
CAPTURE = ("logits", "features", "feature_map")


def sources(id_root: Path, ood_root: Path, n_id: int | None, n_ood: int,
            seed: int) -> tuple[Source, Source]:
    """The ImageNet val images of ``id_root`` (all, or a seeded subset of ``n_id``) and a seeded
    subset of ``n_ood`` CIFAR-10 test images of ``ood_root``, both in source order."""
    rng = np.random.default_rng(seed)
    id_source: Source = ImageNetVal(id_root)
    if n_id is not None and n_id < len(id_source):
        id_source = id_source.subset(np.sort(rng.choice(len(id_source), n_id, replace=False)))
    ood_source = ImageFolder(ood_root, name="cifar10-test")
    return id_source, ood_source.subset(np.sort(rng.choice(len(ood_source), n_ood, replace=False)))


def extract_all(model: Any, source: Source, batch_size: int, progress: bool) -> Activations:
    """Logits, features and the float16 feature map of every image of ``source``."""
    return extract(model, source, capture=CAPTURE, batch_size=batch_size, progress=progress,
                   feature_map_dtype="float16")
