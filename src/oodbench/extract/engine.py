"""``extract``: one forward pass of a classifier over a source, cached on disk.

Everything a post-hoc detector needs (logits, penultimate features, optionally the last feature
map, the linear head) comes from this one pass; a second call with the same model, weights,
source, preprocessing and precision that asks for the same or less (``capture``) is a cache hit
that runs no forward pass at all.

The pass runs shard by shard (a shard is a fixed range of source positions, sized from the
first batch: see ``sharding.py``; stored by ``store.py``). Each complete shard is written to disk before the next one counts, so an
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
from collections.abc import Callable, Iterable
from datetime import datetime, timezone
from typing import Any

import numpy as np
import torch

from oodbench.data.labels import align_labels
from oodbench.data.source import RelabeledSource, Source
from oodbench.errors import (
    CacheError,
    ClassCountMismatchError,
    EmptyInputError,
    Interrupted,
    InvalidInputError,
    UnknownNameError,
)
from oodbench.extract.activations import Activations
from oodbench.extract.forward import Chunk, ForwardPass, stack_outputs
from oodbench.extract.key import cache_key, identity, reusable_identities
from oodbench.extract.loader import check_batch_size, warn_skipped
from oodbench.extract.ray_shards import RayShardDriver, RayShards, ray_driver
from oodbench.extract.runtime import (
    precision_name,
    resolve_amp,
    resolve_device,
    resolve_num_workers,
)
from oodbench.extract.sharding import (
    UNMEASURED_BATCHES,
    check_shard_size,
    measure_shard_size,
    shard_bounds,
)
from oodbench.extract.store import FORMAT_VERSION, SOURCE_ARRAYS, ActivationStore
from oodbench.models.classifier import CAPTURABLE, Classifier

FEATURE_MAP_DTYPES = {"float32": torch.float32, "float16": torch.float16}


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
    repair: bool = False,
    executor: str | RayShards = "local",
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
            ``False`` nothing is written and the arrays are returned in memory. A complete
            entry of the same model, weights, source, transform and precision that captured
            more than ``capture`` (e.g. feature maps too) is reused: no forward pass. Each
            array's checksum is verified the first time a process opens it.
        progress: show a progress bar (images/s and ETA).
        shard_size: images per shard, the unit of crash recovery. ``None`` (default) measures
            the first batch and sizes shards to about 10 s of work and at most 256 MiB of
            arrays, in whole batches (see :mod:`oodbench.extract.sharding`). A resumed run
            keeps the shard size of the run it resumes.
        feature_map_dtype: ``"float32"`` or ``"float16"`` for the stored feature map (float16
            halves the disk space; values beyond +-65504 raise ``NonFiniteError``).
            Logits and features are always float32.
        repair: when a cache entry that would be used is damaged (an array does not match its
            checksum), delete it and extract again instead of raising ``CacheError``.
        executor: ``"local"`` (this process) or ``"ray"`` / :class:`RayShards`: each shard of
            the pass is a Ray task (one GPU each, or ``num_cpus`` CPUs), written into the same
            cache entry, bit-identical to a local pass (see :mod:`oodbench.extract.ray_shards`).
            ``device`` is then the tasks' (``"auto"``: CUDA when they get GPUs).

    Returns:
        :class:`Activations` with logits (N, C), features (N, D), feature_map, labels, ids
        (relative paths or ``"<source>:<i>"``), ``source_indices`` (rows of unreadable images
        are absent), the head's weight and bias when the model has a linear head, and ``meta``:
        ``label_mapping`` (source class -> model class, when the source's class names were
        mapped onto the model's: see :mod:`oodbench.data.labels`),
        model spec, weights digest, source name and fingerprint, transform, capture, precision,
        cache key and path, ``cache_hit``, ``n_cached`` and ``n_computed`` (source images
        whose rows were read from the cache, e.g. the shards an interrupted run kept, and those
        this call ran through the model: together ``n_source``), ``skipped`` (``{"index", "id", "reason"}`` per
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
    source, labels = model_labels(model, source)
    check_batch_size(batch_size)
    shard_size = check_shard_size(shard_size)
    driver = ray_driver(executor, cache)
    if driver is None:
        dev = resolve_device(device)
        amp_dtype = resolve_amp(amp, dev)
    else:
        dev, amp_dtype = driver.runtime(device, amp)
    resolve_num_workers(num_workers, dev, 0)  # checks the value
    ident = identity(model, source, capture, precision_name(amp_dtype), feature_map_dtype)
    key = cache_key(ident)
    run = ForwardPass(model, source, capture, batch_size, dev, amp_dtype, num_workers,
                FEATURE_MAP_DTYPES[feature_map_dtype], progress)
    if cache:
        arrays, manifest, store, hit, n_cached = _extract_cached(run, ident, key, shard_size,
                                                                 labels, repair, driver)
        key, cache_path = store.key, str(store.path)
    else:
        size = shard_size or UNMEASURED_BATCHES * batch_size
        arrays, manifest = _extract_in_memory(run, ident, key, size, labels)
        hit, cache_path, n_cached = False, None, 0
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
        "n_cached": n_cached,
        "n_computed": n - n_cached,
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
        "label_mapping": _label_mapping(source),
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
    run: ForwardPass,
    ident: dict[str, Any],
    key: str,
    shard_size: int | None,
    labels: np.ndarray,
    repair: bool,
    driver: RayShardDriver | None,
) -> tuple[dict[str, np.ndarray], dict[str, Any], ActivationStore, bool, int]:
    """``(arrays, manifest, store, cache_hit, n_cached)``: a reusable complete entry, else a
    (resumed) pass in this process, or on Ray with ``driver``; ``n_cached`` source images came
    from the cache (all of them on a hit, those of the kept shards on a resume)."""
    n = len(run.source)
    wanted = (*run.capture, "source_indices", *SOURCE_ARRAYS)
    found = _reuse(ident, wanted, repair)
    if found is not None:
        return (*found, True, n)
    store = ActivationStore.for_key(key)
    with store.lock() as waited:
        if waited and (found := _reuse(ident, wanted, repair)) is not None:
            return (*found, True, n)  # another process finished it while we waited
        measure = measure_shard_size if driver is None else driver.measure_shard_size
        manifest, head = _resume_or_start(run, store, ident, key, shard_size, measure)
        n_cached = _kept_images(n, manifest)
        if driver is None:
            _write_shards(run, store, manifest, head)
        else:
            driver.write_shards(run, store, manifest)
        _require_rows(run.source, manifest)
        manifest["timings"] = dict(run.timings)
        manifest["finished"] = _now()
        tic = time.perf_counter()
        store.finalize(manifest, lambda rows: _source_arrays(run.source, labels, rows))
        run.timings["write_s"] += time.perf_counter() - tic
    return store.load_arrays(manifest, wanted), manifest, store, False, n_cached


def _kept_images(n: int, manifest: dict[str, Any]) -> int:
    """Source images in the shards ``manifest`` already holds (readable or not)."""
    return sum(hi - lo for index, lo, hi in shard_bounds(n, manifest["shard_size"])
               if str(index) in manifest["shards"])


def _reuse(
    ident: dict[str, Any], wanted: tuple[str, ...], repair: bool
) -> tuple[dict[str, np.ndarray], dict[str, Any], ActivationStore] | None:
    """The arrays of the first complete entry that holds everything ``ident`` asks for.

    A damaged entry raises ``CacheError`` naming it, or with ``repair`` is deleted (and the
    search goes on, ending in a new pass when nothing else fits).
    """
    for candidate in reusable_identities(ident):
        store = ActivationStore.for_key(cache_key(candidate))
        manifest = store.complete_manifest()
        if manifest is None:
            continue
        try:
            return store.load_arrays(manifest, wanted), manifest, store
        except CacheError:
            if not repair:
                raise
            print(f"repair: deleting the damaged cache entry {store.path}", file=sys.stderr)
            store.remove()
    return None


def _write_shards(
    run: ForwardPass, store: ActivationStore, manifest: dict[str, Any], head: Chunk | None
) -> None:
    """Compute and write every shard the manifest does not hold yet.

    ``head`` is the output of the first batch of shard 0 when it was already run to measure the
    shard size; the pass continues after it, and shard 0 is written with it in front.
    """
    n = len(run.source)
    todo = [s for s in shard_bounds(n, manifest["shard_size"]) if str(s[0]) not in manifest["shards"]]
    if head is not None:
        head_rows = min(run.batch_size, n)
        if todo[0][2] == head_rows:  # shard 0 is that one batch
            store.write_shard(manifest, 0, *head)
            todo, head = todo[1:], None
        else:
            todo[0] = (0, head_rows, todo[0][2])
    done = n - sum(hi - lo for _, lo, hi in todo)
    try:
        for index, arrays, skipped in run.shards(todo, done):
            if index == 0 and head is not None:
                arrays, skipped = _join(head, (arrays, skipped))
            tic = time.perf_counter()
            store.write_shard(manifest, index, arrays, skipped)
            run.timings["write_s"] += time.perf_counter() - tic
    except KeyboardInterrupt as err:
        raise Interrupted(
            f"{len(manifest['shards'])} of {manifest['n_shards']} shards of the extraction are "
            f"kept in {store.path}; run the same extraction again to resume"
        ) from err


def _join(first: Chunk, second: Chunk) -> Chunk:
    """Two consecutive chunks as one (either may have no readable image)."""
    parts = [arrays for arrays, _ in (first, second) if len(arrays["source_indices"])]
    return stack_outputs(parts), [*first[1], *second[1]]


def _extract_in_memory(
    run: ForwardPass, ident: dict[str, Any], key: str, shard_size: int, labels: np.ndarray
) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    manifest = _new_manifest(run.source, ident, key, shard_size)
    parts = []
    for index, arrays, skipped in run.shards(shard_bounds(len(run.source), shard_size), 0):
        manifest["shards"][str(index)] = {"rows": len(arrays["source_indices"]), "skipped": skipped}
        if len(arrays["source_indices"]):
            parts.append(arrays)
    _require_rows(run.source, manifest)
    out = stack_outputs(parts)
    return {**out, **_source_arrays(run.source, labels, out["source_indices"])}, manifest


def _resume_or_start(
    run: ForwardPass,
    store: ActivationStore,
    ident: dict[str, Any],
    key: str,
    shard_size: int | None,
    measure: Callable[[ForwardPass], tuple[int, Chunk | None, dict[str, Any]]],
) -> tuple[dict[str, Any], Chunk | None]:
    """The manifest of an interrupted run of the same key (keeping only intact shards), or a
    new one; for a new one without a given ``shard_size``, the size ``measure`` gives, and the
    first batch's output when it keeps it."""
    old = store.read_manifest()
    head = None
    if old and old.get("key") == key and old.get("format") == FORMAT_VERSION and not old.get("complete"):
        old["shards"] = store.valid_shards(old)
        manifest = old
    elif shard_size is not None:
        manifest = _new_manifest(run.source, ident, key, shard_size)
    else:
        shard_size, head, sizing = measure(run)
        manifest = {**_new_manifest(run.source, ident, key, shard_size), "shard_sizing": sizing}
    store.write_manifest(manifest)
    return manifest, head


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


def model_labels(model: Classifier, source: Source) -> tuple[Source, np.ndarray]:
    """The source as ``extract`` reads it (its class names mapped onto the model's classes, see
    :mod:`oodbench.data.labels`) and its labels, checked to index the model's classes.

    Raises ``InvalidInputError`` / ``ClassCountMismatchError`` naming the fix; no forward pass.
    """
    source = align_labels(source, model.class_wnids, model.class_names, model=repr(model.spec))
    return source, _checked_labels(model, source)


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


def _label_mapping(source: Source) -> dict[str, int] | None:
    """Source class name -> model class index when ``extract`` relabelled the source."""
    if not isinstance(source, RelabeledSource) or source.parent.class_names is None:
        return None
    old = np.asarray(source.parent.labels, dtype=np.int64)
    classes, first = np.unique(old, return_index=True)
    names = source.parent.class_names
    return {str(names[c]): int(source.labels[i]) for c, i in zip(classes, first) if c >= 0}


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

