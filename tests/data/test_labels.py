"""Class names of a source matched to a model's classes (wnids, names, lemmas)."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from oodbench.data import ImageFolder
from oodbench.data.imagenet import imagenet1k_wnids, lemmas
from oodbench.data.labels import (
    LabelMappingWarning,
    align_labels,
    map_classes,
    match_classes,
    normalize_name,
    warn_if_chance_accuracy,
)
from oodbench.data.source import RelabeledSource

WNIDS = imagenet1k_wnids()
TIMM_NAMES = [lemmas(w) for w in WNIDS]  # "tench, Tinca tinca": timm's label descriptions


def _folder(root: Path, classes: list[str], per_class: int = 2) -> Path:
    rng = np.random.default_rng(0)
    for name in classes:
        (root / name).mkdir(parents=True)
        for i in range(per_class):
            Image.fromarray(rng.integers(0, 256, (4, 4, 3), dtype=np.uint8)).save(root / name / f"{i}.png")
    return root


def test_wnid_folders_map_to_the_imagenet_class_indices(tmp_path: Path):
    chosen = ["n02086240", "n01440764", "n04592741"]  # Shih-Tzu 155, tench 0, wing 908
    source = ImageFolder(_folder(tmp_path, chosen))
    assert list(source.labels) == [0, 0, 1, 1, 2, 2]  # folder positions in sorted order
    view = align_labels(source, WNIDS, TIMM_NAMES)
    assert isinstance(view, RelabeledSource)
    expected = [WNIDS.index(w) for w in sorted(chosen) for _ in range(2)]
    assert list(view.labels) == expected == [0, 0, 155, 155, 908, 908]
    assert view.class_names == WNIDS and view.ids == source.ids and len(view) == 6
    assert view.path(2) == source.path(2)
    assert view.fingerprint() != source.fingerprint()
    assert np.array_equal(np.asarray(view.load(3)), np.asarray(source.load(3)))


def test_names_and_lemmas_match_ignoring_case_and_separators():
    torchvision_names = [n.split(",")[0] for n in TIMM_NAMES]
    found = match_classes(["Tinca_tinca", "goldfish", "great-white-shark"], None, TIMM_NAMES)
    assert list(found.indices) == [0, 1, 2] and found.by == ["name"] * 3 and found.complete
    found = match_classes(["tench", "Goldfish"], WNIDS, torchvision_names)
    assert list(found.indices) == [0, 1]
    assert normalize_name("  Great_White--Shark ") == "great white shark"


def test_ambiguous_and_unknown_names_match_nothing():
    # "crane" is both a bird (n02012849) and a machine (n03126707) in ImageNet-1k
    found = match_classes(["crane", "tench", "spaceship"], WNIDS, TIMM_NAMES)
    assert list(found.indices) == [-1, 0, -1] and found.unmatched == ["crane", "spaceship"]
    assert not found.complete


def test_sources_that_cannot_or_need_not_be_mapped_are_returned_as_they_are(tmp_path: Path):
    plain = ImageFolder(_folder(tmp_path / "a", ["cat", "dog"]))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert align_labels(plain, WNIDS, TIMM_NAMES) is plain  # no class matches: no warning
        assert align_labels(plain, None, None) is plain  # the model has no class list
        ordered = ImageFolder(_folder(tmp_path / "b", WNIDS[:3]), class_names=WNIDS)
        assert align_labels(ordered, WNIDS, TIMM_NAMES) is ordered  # labels are indices already
    mostly = ImageFolder(_folder(tmp_path / "c", ["n01440764", "n01443537", "notaclass"]))
    with pytest.warns(LabelMappingWarning, match=r"2 of the 3 classes.*\['notaclass'\]"):
        assert align_labels(mostly, WNIDS, TIMM_NAMES, model="'m'") is mostly


def test_relabeled_sources_keep_ood_labels_and_pickle():
    import pickle

    from oodbench.data import ArraySource

    parent = ArraySource(np.zeros((3, 4, 4, 3), dtype=np.uint8), labels=np.array([1, -1, 0]))
    view = map_classes(parent, np.array([7, 3]), [f"c{i}" for i in range(10)])
    assert list(view.labels) == [3, -1, 7]
    assert not view.labels.flags.writeable
    again = pickle.loads(pickle.dumps(view))
    assert list(again.labels) == [3, -1, 7] and again.fingerprint() == view.fingerprint()


def test_chance_accuracy_warns():
    labels = np.repeat(np.arange(10), 5)
    with pytest.warns(LabelMappingWarning, match="0.0200, at chance level for 10 classes"):
        warn_if_chance_accuracy(0.02, labels, where="m on s")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warn_if_chance_accuracy(0.5, labels, where="m on s")
        warn_if_chance_accuracy(0.0, np.full(5, -1), where="m on s")  # no labels at all
