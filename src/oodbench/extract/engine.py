"""``extract``: one forward pass of a classifier over a source, cached on disk.

Everything a post-hoc detector needs (logits, penultimate features, optionally the last feature
map, the linear head) comes from this one pass; a second call with the same model, weights,
source, preprocessing, capture and precision is a cache hit that runs no forward pass at all.

The pass runs shard by shard (a shard is a fixed range of source positions; see
``store.py``). Each complete shard is written to disk before the next one counts, so an
interrupted run (Ctrl-C, a crash, SIGKILL) loses at most the shard in progress, and the
resumed run gives arrays bit-identical to an uninterrupted one: the batches are the same
(they never cross a shard boundary), and so are the numbers for a given process configuration.
``torch.use_deterministic_algorithms`` is not switched on: that is process-global state and the
inference kernels used on CPU are already deterministic for a fixed batch composition and
thread count. On CUDA, a resumed run matches bit for bit when cuDNN picks the same kernels
(``torch.backends.cudnn.benchmark = False``, the default; set
``torch.backends.cudnn.deterministic = True`` to be sure).
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Iterable
from datetime import datetime, timezone
from typing import Any

import numpy as np
import torch

from oodbench.data.source import Source
from oodbench.errors import (
    ClassCountMismatchError,
    EmptyInputError,
    InvalidInputError,
    UnknownNameError,
)
from oodbench.extract.activations import Activations
from oodbench.extract.forward import ForwardPass, stack_outputs
from oodbench.extract.key import cache_key, identity
from oodbench.extract.loader import check_batch_size, warn_skipped
from oodbench.extract.runtime import (
    precision_name,
    resolve_amp,
    resolve_device,
    resolve_num_workers,
)
from oodbench.extract.store import FORMAT_VERSION, ActivationStore
from oodbench.models.classifier import CAPTURABLE, Classifier

FEATURE_MAP_DTYPES = {"float32": torch.float32, "float16": torch.float16}
#: a shard holds at least this many batches (unless the source is smaller) ...
_MIN_BATCHES_PER_SHARD = 16
#: ... and a source is split into at most about this many shards
_MAX_SHARDS = 256


def extract(
    model: Classifier,
    source: Source,
    *,
    capture: Iterable[str] = ("logits", "features"),
    batch_size: int = 64,
    device: str | torch.device = "auto",
    amp: str = "auto",
    num_workers: int | str = "auto",
    cache: bool = True,
    progress: bool = True,
    shard_size: int | None = None,
    feature_map_dtype: str = "float32",
) -> Activations:
    """Run ``model`` once over ``source`` and return what it computed, memory-mapped from the cache.

    Args:
        model: a :class:`~oodbench.models.classifier.Classifier`; it is put in eval mode for the
            pass (its mode is restored afterwards) and moved to ``device`` (it stays there).
        source: the images and labels (:class:`~oodbench.data.source.Source`).
        capture: any of ``"logits"`` (always included), ``"features"`` (penultimate, pooled),
            ``"feature_map"`` (last block before pooling).
        batch_size: images per forward pass.
        device: ``"auto"`` (CUDA if available, else CPU), ``"cpu"``, ``"cuda:0"``, ...
        amp: ``"auto"`` (bf16 autocast + channels-last on CUDA, off on CPU), ``"off"``,
            ``"bf16"`` or ``"fp16"``. The precision is part of the cache key.
        num_workers: DataLoader workers; ``"auto"`` = 0 on CPU, up to 16 on CUDA
            (see :mod:`oodbench.extract.runtime`).
        cache: keep the pass under ``cache_dir()/activations/<key>/`` and reuse it; with
            ``False`` nothing is written and the arrays are returned in memory.
        progress: show a progress bar (images/s and ETA).
        shard_size: images per shard, the unit of crash recovery (default: 16 batches, or
            more when a source without feature maps would need over 256 shards). A resumed
            run keeps the shard size of the run it resumes.
        feature_map_dtype: ``"float32"`` or ``"float16"`` for the stored feature map (float16
            halves the disk space; values beyond +-65504 raise ``NonFiniteError``).
            Logits and features are always float32.

    Returns:
        :class:`Activations` with logits (N, C), features (N, D), feature_map, labels, ids
        (relative paths or ``"<source>:<i>"``), ``source_indices`` (rows of unreadable images
        are absent), the head's weight and bias when the model has a linear head, and ``meta``:
        model spec, weights digest, source name and fingerprint, transform, capture, precision,
        cache key and path, ``cache_hit``, ``skipped`` (``{"index", "id", "reason"}`` per
        unreadable image) and ``timings``. ``predictions`` is derived (argmax of the logits).

    Raises:
        EmptyInputError: the source has no images, or none of them could be read.
        ClassCountMismatchError: a label is >= ``model.num_classes``, or the logits have
            another number of columns than ``model.num_classes``.
        NonFiniteError: NaN/inf logits (the message names the samples; completed shards stay
            in the cache).
    """
    start = time.perf_counter()
    capture = _normalize_capture(capture)
    if feature_map_dtype not in FEATURE_MAP_DTYPES:
        raise UnknownNameError("feature_map_dtype", str(feature_map_dtype), FEATURE_MAP_DTYPES)
    n = len(source)
    if n == 0:
        raise EmptyInputError(
            f"source {source.name!r} ({type(source).__name__}) holds no images; point it at a "
            "folder or list that contains images"
        )
    labels = _checked_labels(model, source)
    check_batch_size(batch_size)
    dev = resolve_device(device)
    amp_dtype = resolve_amp(amp, dev)
    resolve_num_workers(num_workers, dev, 0)  # checks the value
    ident = identity(model, source, capture, precision_name(amp_dtype), feature_map_dtype)
    key = cache_key(ident)
    run = ForwardPass(model, source, capture, batch_size, dev, amp_dtype, num_workers,
                FEATURE_MAP_DTYPES[feature_map_dtype], progress)
    size = _resolve_shard_size(shard_size, n, batch_size, "feature_map" in capture)
    if cache:
        arrays, manifest, hit = _extract_cached(run, ident, key, size, labels)
        cache_path: str | None = str(ActivationStore.for_key(key).path)
    else:
        arrays, manifest = _extract_in_memory(run, ident, key, size, labels)
        hit, cache_path = False, None
    skipped = [s for k in sorted(manifest["shards"], key=int) for s in manifest["shards"][k]["skipped"]]
    timings = dict(run.timings) if not hit else {"extraction": manifest.get("timings", {})}
    timings.update(total_s=time.perf_counter() - start, cache_hit=hit)
    if not hit:
        timings["images_per_s"] = timings["images"] / timings["total_s"]
    head_weight, head_bias = _linear_head(model)
    meta = {
        "model": model.spec,
        "weights_digest": ident["weights_digest"],
        "source": source.name,
        "source_fingerprint": ident["source_fingerprint"],
        "n_source": n,
        "transform": ident["transform"],
        "capture": list(capture),
        "precision": ident["precision"],
        "feature_map_dtype": ident["feature_map_dtype"],
        "device": str(dev),
        "cache_key": key,
        "cache_path": cache_path,
        "cache_hit": hit,
        "skipped": skipped,
        "timings": timings,
    }
    warn_skipped(source, skipped)
    return Activations(
        logits=arrays["logits"],
        labels=arrays["labels"],
        ids=arrays["ids"],
        features=arrays.get("features"),
        feature_map=arrays.get("feature_map"),
        head_weight=head_weight,
        head_bias=head_bias,
        source=source,
        source_indices=arrays["source_indices"],
        meta=meta,
    )


# ---------------------------------------------------------------------------------------------
# cached and in-memory drivers


def _extract_cached(
    run: ForwardPass, ident: dict[str, Any], key: str, shard_size: int, labels: np.ndarray
) -> tuple[dict[str, np.ndarray], dict[str, Any], bool]:
    store = ActivationStore.for_key(key)
    manifest = store.complete_manifest()
    if manifest is not None:
        return store.load_arrays(manifest), manifest, True
    with store.lock() as waited:
        if waited and (manifest := store.complete_manifest()) is not None:
            return store.load_arrays(manifest), manifest, True  # another process finished it
        manifest = _resume_or_start(store, run.source, ident, key, shard_size)
        todo = [s for s in _shard_bounds(len(run.source), manifest["shard_size"])
                if str(s[0]) not in manifest["shards"]]
        done = len(run.source) - sum(hi - lo for _, lo, hi in todo)
        try:
            for index, arrays, skipped in run.shards(todo, done):
                tic = time.perf_counter()
                store.write_shard(manifest, index, arrays, skipped)
                run.timings["write_s"] += time.perf_counter() - tic
        except KeyboardInterrupt:
            print(
                f"interrupted: {len(manifest['shards'])} of {manifest['n_shards']} shards are kept "
                f"in {store.path}; run the same extraction again to resume",
                file=sys.stderr,
            )
            raise
        _require_rows(run.source, manifest)
        manifest["timings"] = dict(run.timings)
        manifest["finished"] = _now()
        tic = time.perf_counter()
        store.finalize(manifest, lambda rows: _source_arrays(run.source, labels, rows))
        run.timings["write_s"] += time.perf_counter() - tic
    return store.load_arrays(manifest), manifest, False


def _extract_in_memory(
    run: ForwardPass, ident: dict[str, Any], key: str, shard_size: int, labels: np.ndarray
) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    manifest = _new_manifest(run.source, ident, key, shard_size)
    parts = []
    for index, arrays, skipped in run.shards(_shard_bounds(len(run.source), shard_size), 0):
        manifest["shards"][str(index)] = {"rows": len(arrays["source_indices"]), "skipped": skipped}
        if len(arrays["source_indices"]):
            parts.append(arrays)
    _require_rows(run.source, manifest)
    out = stack_outputs(parts)
    return {**out, **_source_arrays(run.source, labels, out["source_indices"])}, manifest


def _resume_or_start(
    store: ActivationStore, source: Source, ident: dict[str, Any], key: str, shard_size: int
) -> dict[str, Any]:
    """The manifest of an interrupted run of the same key (keeping only intact shards), or a new one."""
    old = store.read_manifest()
    if old and old.get("key") == key and old.get("format") == FORMAT_VERSION and not old.get("complete"):
        old["shards"] = store.valid_shards(old)
        manifest = old
    else:
        manifest = _new_manifest(source, ident, key, shard_size)
    store.write_manifest(manifest)
    return manifest


def _new_manifest(source: Source, ident: dict[str, Any], key: str, shard_size: int) -> dict[str, Any]:
    return {
        **ident,
        "key": key,
        "source": {"name": source.name, "class": type(source).__name__, "n": len(source)},
        "shard_size": shard_size,
        "n_shards": math.ceil(len(source) / shard_size),
        "shards": {},
        "complete": False,
        "created": _now(),
    }


def _require_rows(source: Source, manifest: dict[str, Any]) -> None:
    if not any(s["rows"] for s in manifest["shards"].values()):
        reasons = [s["reason"] for r in manifest["shards"].values() for s in r["skipped"]][:3]
        raise EmptyInputError(
            f"none of the {len(source)} images of source {source.name!r} could be read "
            f"(e.g. {reasons}); check the files and the source's root folder"
        )


def _source_arrays(source: Source, labels: np.ndarray, rows: np.ndarray) -> dict[str, np.ndarray]:
    """The per-row labels and ids (a fixed-width unicode array, memory-mappable) of ``rows``."""
    ids = source.ids
    return {"labels": labels[rows], "ids": np.array([str(ids[i]) for i in rows], dtype=str)}


# ---------------------------------------------------------------------------------------------
# argument checks


def _normalize_capture(capture: Iterable[str]) -> tuple[str, ...]:
    names = {capture} if isinstance(capture, str) else set(capture)
    for name in names:
        if name not in CAPTURABLE:
            raise UnknownNameError("activation to capture", name, CAPTURABLE)
    return tuple(n for n in CAPTURABLE if n in names | {"logits"})


def _checked_labels(model: Classifier, source: Source) -> np.ndarray:
    labels = np.asarray(source.labels)
    if labels.shape != (len(source),) or not np.issubdtype(labels.dtype, np.integer):
        raise InvalidInputError(
            f"source {source.name!r} must give one integer label per image; got labels of "
            f"shape {labels.shape} and dtype {labels.dtype} for {len(source)} images"
        )
    labels = labels.astype(np.int64)
    if labels.min() < -1:
        raise InvalidInputError(
            f"source {source.name!r} has label {labels.min()}; labels are class indices >= 0, "
            "or -1 for a sample without an ID class"
        )
    if labels.max() >= model.num_classes:
        raise ClassCountMismatchError(
            f"source {source.name!r} has labels up to {labels.max()} but model "
            f"{model.spec!r} predicts {model.num_classes} classes. Use a source whose labels "
            f"index the model's classes (0..{model.num_classes - 1}, e.g. the ImageNet-1k "
            "order for an ImageNet model), or give OOD samples the label -1"
        )
    return labels


def _resolve_shard_size(shard_size: int | None, n: int, batch_size: int, big_rows: bool) -> int:
    """The default: 16 batches; without feature maps (small rows) also at most ~256 shards.
    A shard is held in memory until written, so with feature maps shards stay at 16 batches."""
    if shard_size is None:
        batches = _MIN_BATCHES_PER_SHARD
        if not big_rows:
            batches = max(batches, math.ceil(n / (_MAX_SHARDS * batch_size)))
        return batches * batch_size
    if isinstance(shard_size, bool) or not isinstance(shard_size, int) or shard_size < 1:
        raise InvalidInputError(f"shard_size must be a positive integer; got {shard_size!r}")
    return shard_size


def _shard_bounds(n: int, shard_size: int) -> list[tuple[int, int, int]]:
    return [(k, lo, min(lo + shard_size, n)) for k, lo in enumerate(range(0, n, shard_size))]


def _linear_head(model: Classifier) -> tuple[np.ndarray | None, np.ndarray | None]:
    """The head's weight and bias as float32 numpy, or ``(None, None)`` for a non-linear head."""
    try:
        weight, bias = model.head_weight, model.head_bias
    except (NotImplementedError, InvalidInputError):  # adapters raise these for other heads
        return None, None
    if weight is None or bias is None:
        return None, None
    return _numpy(weight), _numpy(bias)


def _numpy(tensor: torch.Tensor) -> np.ndarray:
    return tensor.detach().to("cpu", torch.float32).numpy()


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")

