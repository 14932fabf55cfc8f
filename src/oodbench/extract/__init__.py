"""The forward pass and its cache: ``extract(model, source) -> Activations``.

One pass per (model, source) is computed, written to a content-addressed cache under
``cache_dir()/activations/<key>/`` in crash-safe shards, and memory-mapped back; every detector,
benchmark and metric then runs from it; with ``executor="ray"`` the shards run as Ray tasks on
many GPUs or nodes (:mod:`oodbench.extract.ray_shards`). ``iterate_batches`` is the same DataLoader machinery for
the detectors that need the live model (ODIN, MC-dropout). ``list_cache``, ``remove`` and
``verify`` manage the cache (``oodbench cache ls | rm | verify``).
"""

from __future__ import annotations

from oodbench.extract.activations import Activations
from oodbench.extract.cache import list_cache, remove, resolve_key, verify
from oodbench.extract.engine import extract
from oodbench.extract.key import cache_key, identity
from oodbench.extract.loader import SkippedImagesWarning, iterate_batches
from oodbench.extract.ray_shards import RayShards

__all__ = [
    "Activations",
    "RayShards",
    "SkippedImagesWarning",
    "cache_key",
    "extract",
    "identity",
    "iterate_batches",
    "list_cache",
    "remove",
    "resolve_key",
    "verify",
]
