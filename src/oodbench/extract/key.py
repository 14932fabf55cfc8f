"""The content address of an extraction: what goes into the cache key.

    key = sha256(JSON of {format, model spec, weights digest, source fingerprint,
                          transform repr, sorted capture, precision, feature-map dtype})

Anything that changes the numbers changes the key: other weights, another image or label or
order, another preprocessing, another autocast precision. The batch size, device, worker count
and shard size do not enter (they change nothing beyond float rounding).

What was captured is part of the key, so every entry stays content-addressed; an extraction
that asks for less than a complete entry holds reuses it (:func:`reusable_identities`): the
same pass with ``capture = {logits, features, feature_map}`` serves ``{logits}`` and
``{logits, features}``. Logits and features are float32 in every entry, so a request without
feature maps may reuse an entry with feature maps of either dtype.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import re
from typing import Any

from oodbench.data.source import Source
from oodbench.extract.store import FORMAT_VERSION
from oodbench.models.classifier import CAPTURABLE, Classifier

#: the dtypes a stored feature map may have
FEATURE_MAP_DTYPE_NAMES = ("float32", "float16")

_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


def transform_repr(transform: Any) -> str:
    """``repr(transform)`` without memory addresses (``<function f at 0x7f..>`` -> ``<function f>``),
    so the key of a model whose transform is a plain function is stable across processes."""
    return _ADDRESS.sub("", repr(transform))


def identity(
    model: Classifier,
    source: Source,
    capture: tuple[str, ...],
    precision: str,
    feature_map_dtype: str,
) -> dict[str, Any]:
    """Everything that determines the extracted arrays (the fields hashed into the key)."""
    return {
        "format": FORMAT_VERSION,
        "model": model.spec,
        "weights_digest": model.weights_digest(),
        "source_fingerprint": source.fingerprint(),
        "transform": transform_repr(model.transform),
        "capture": sorted(capture),
        "precision": precision,
        "feature_map_dtype": feature_map_dtype if "feature_map" in capture else None,
    }


def identity_of(manifest: dict[str, Any]) -> dict[str, Any]:
    """The identity a cache entry's manifest was written for (its key's fields)."""
    fields = ("format", "model", "weights_digest", "source_fingerprint", "transform", "capture",
              "precision", "feature_map_dtype")
    return {name: manifest.get(name) for name in fields}


def cache_key(ident: dict[str, Any]) -> str:
    """Hex sha256 of the canonical JSON of :func:`identity`."""
    blob = json.dumps(ident, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(blob).hexdigest()


def reusable_identities(ident: dict[str, Any]) -> list[dict[str, Any]]:
    """The identities of every entry whose arrays include all that ``ident`` asks for.

    They differ from ``ident`` only in ``capture`` (a superset) and, when ``ident`` has no
    feature map, in the feature map's dtype. ``ident`` itself comes first, then supersets by
    size (fewest arrays first), float32 feature maps before float16.
    """
    asked = set(ident["capture"])
    optional = [name for name in CAPTURABLE if name not in asked]
    out = []
    for size in range(len(optional) + 1):
        for extra in itertools.combinations(optional, size):
            capture = sorted(asked | set(extra))
            if "feature_map" not in capture:
                dtypes: tuple[str | None, ...] = (None,)
            elif "feature_map" in asked:
                dtypes = (ident["feature_map_dtype"],)
            else:
                dtypes = FEATURE_MAP_DTYPE_NAMES
            out += [{**ident, "capture": capture, "feature_map_dtype": d} for d in dtypes]
    return out
