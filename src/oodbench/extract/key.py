"""The content address of an extraction: what goes into the cache key.

    key = sha256(JSON of {format, model spec, weights digest, source fingerprint,
                          transform repr, sorted capture, precision, feature-map dtype})

Anything that changes the numbers changes the key: other weights, another image or label or
order, another preprocessing, another autocast precision. The batch size, device, worker count
and shard size do not enter (they change nothing beyond float rounding).
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

from oodbench.data.source import Source
from oodbench.extract.store import FORMAT_VERSION
from oodbench.models.classifier import Classifier

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


def cache_key(ident: dict[str, Any]) -> str:
    """Hex sha256 of the canonical JSON of :func:`identity`."""
    blob = json.dumps(ident, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(blob).hexdigest()
