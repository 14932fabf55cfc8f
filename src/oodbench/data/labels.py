"""Labels that index the model's classes: matching a source's class names to a model's.

An :class:`~oodbench.data.ImageFolder` labels each image by the position of its class folder in
sorted order (as torchvision does), so ten ImageNet wnid folders get labels 0-9, while an
ImageNet-1k model's outputs are the 1000 classes in sorted-wnid order: ID accuracy is then
silently wrong. :func:`match_classes` maps every class name of a source to the model's class
index when the names say which class they are:

* by wnid: ``n01440764`` is the model class whose wnid that is (``model.class_wnids``), and
* by name: ``tench``, ``Tinca tinca``, ``great_white_shark`` match any comma-separated lemma of
  the model's class names (timm's ``"tench, Tinca tinca"``, torchvision's ``"tench"``),
  ignoring case, ``_``/``-`` and repeated spaces; a lemma shared by two classes (``crane`` the
  bird and the machine) names neither.

A source is relabelled (:func:`align_labels`, used by ``oodbench.extract``) only when *every*
one of its classes matches; the view's ``class_names`` are then the model's (wnids when known).
When most classes match but not all, nothing is relabelled and a :class:`LabelMappingWarning`
names the classes that did not.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from oodbench.data.source import RelabeledSource, Source
from oodbench.errors import InvalidInputError


class LabelMappingWarning(UserWarning):
    """A source's class names look like a model's classes but could not all be matched, or its
    ID accuracy is at chance level: its labels are probably not the model's class indices."""


_SEPARATORS = re.compile(r"[\s_\-]+")


def normalize_name(name: str) -> str:
    """``"Great_White-Shark "`` -> ``"great white shark"`` (the form names are compared in)."""
    return _SEPARATORS.sub(" ", name).strip().lower()


@dataclass(frozen=True)
class ClassMatch:
    """How a source's class names map onto a model's classes.

    Attributes:
        indices: per source class, the model class index, or -1 where the name matched none.
        by: ``"wnid"`` or ``"name"`` per matched class (``""`` for unmatched).
        unmatched: the source class names that matched no model class (or were ambiguous).
    """

    indices: np.ndarray
    by: list[str] = field(default_factory=list)
    unmatched: list[str] = field(default_factory=list)

    @property
    def complete(self) -> bool:
        return not self.unmatched

    @property
    def identity(self) -> bool:
        """Whether every source label already is its model class index."""
        return self.complete and bool(np.array_equal(self.indices, np.arange(self.indices.size)))


def model_class_keys(
    wnids: Sequence[str] | None, names: Sequence[str] | None
) -> dict[str, int]:
    """Normalised key -> model class index for every unambiguous wnid, class name and lemma."""
    candidates: dict[str, set[int]] = {}
    for index, wnid in enumerate(wnids or ()):
        candidates.setdefault(wnid.strip().lower(), set()).add(index)
    for index, name in enumerate(names or ()):
        for key in {name, *name.split(",")}:
            if normalize_name(key):
                candidates.setdefault(normalize_name(key), set()).add(index)
    return {key: next(iter(found)) for key, found in candidates.items() if len(found) == 1}


def match_classes(
    source_names: Sequence[str],
    model_wnids: Sequence[str] | None,
    model_names: Sequence[str] | None,
) -> ClassMatch:
    """Match each of ``source_names`` to a model class (see the module docstring)."""
    keys = model_class_keys(model_wnids, model_names)
    wnid_keys = {w.strip().lower() for w in model_wnids or ()}
    indices, by, unmatched = [], [], []
    for name in source_names:
        key = name.strip().lower() if name.strip().lower() in wnid_keys else normalize_name(name)
        index = keys.get(key, -1)
        indices.append(index)
        by.append("" if index < 0 else "wnid" if key in wnid_keys else "name")
        if index < 0:
            unmatched.append(name)
    return ClassMatch(np.asarray(indices, dtype=np.int64), by, unmatched)


def map_classes(source: Source, mapping: np.ndarray, class_names: Sequence[str] | None) -> RelabeledSource:
    """``source`` with each label ``l >= 0`` replaced by ``mapping[l]`` (-1 stays -1);
    ``class_names`` name the target classes (``None`` when unknown)."""
    mapping = np.asarray(mapping, dtype=np.int64)
    labels = np.asarray(source.labels, dtype=np.int64)
    return RelabeledSource(source, np.where(labels >= 0, mapping[np.clip(labels, 0, None)], -1),
                           class_names)


def align_labels(
    source: Source,
    model_wnids: Sequence[str] | None,
    model_names: Sequence[str] | None,
    *,
    model: str = "the model",
) -> Source:
    """``source`` with labels that are the model's class indices, when its class names say so.

    Returns ``source`` itself when it has no class names, when its labels already are the
    model's indices, or when its classes do not all match (then, if at least half match, a
    :class:`LabelMappingWarning` names those that did not); otherwise a
    :class:`RelabeledSource` whose ``class_names`` are the model's wnids (or names).
    """
    names = source.class_names
    if not names or (not model_wnids and not model_names):
        return source
    match = match_classes(names, model_wnids, model_names)
    if match.identity:
        return source
    if not match.complete:
        matched = len(names) - len(match.unmatched)
        if matched * 2 >= len(names):
            warnings.warn(
                f"{matched} of the {len(names)} classes of source {source.name!r} are classes of "
                f"{model}, but {match.unmatched[:10]} are not, so its labels stay the folder "
                f"positions 0-{len(names) - 1} and ID accuracy will be wrong. Name every class "
                "folder by one of the model's classes (a wnid like n01440764, or a class name), "
                "or move the others out",
                LabelMappingWarning,
                stacklevel=3,
            )
        return source
    targets = list(model_wnids) if model_wnids else list(model_names or ())
    return map_classes(source, match.indices, targets)


def apply_label_map(source: Source, label_map: Mapping[str, int]) -> RelabeledSource:
    """``source`` with each class (by name) relabelled to the model class index ``label_map``
    gives it (``{"my_cats": 281}``); every class of the source must be in the map."""
    names = list(source.class_names or ())
    missing = [n for n in names if n not in label_map]
    if not names or missing:
        raise InvalidInputError(
            f"source {source.name!r}: label_map gives no model class index for the classes "
            f"{missing[:10] if names else '(the source has no class names)'}; map every class "
            "folder to the index of its model class"
        )
    bad = {n: i for n, i in label_map.items() if not isinstance(i, int) or i < 0}
    if bad:
        raise InvalidInputError(f"label_map values must be class indices >= 0; got {bad}")
    return map_classes(source, np.asarray([label_map[n] for n in names]), None)


def warn_if_chance_accuracy(accuracy: float, labels: np.ndarray, *, where: str) -> None:
    """A :class:`LabelMappingWarning` when ``accuracy`` is within 20 % of chance (``1 / k`` for
    ``k`` distinct labels): the labels are probably not the model's class indices."""
    k = np.unique(labels[labels >= 0]).size
    if k >= 2 and accuracy < 1.2 / k:
        warnings.warn(
            f"ID accuracy of {where} is {accuracy:.4f}, at chance level for {k} classes "
            f"(1/{k} = {1 / k:.4f}). If the model is trained, its labels are probably not the "
            "model's class indices: an ImageFolder numbers its class folders 0, 1, 2, ... in "
            "sorted order unless the folders are named by the model's classes (ImageNet wnids "
            "like n01440764, or class names) or class_names= gives the order",
            LabelMappingWarning,
            stacklevel=3,
        )
