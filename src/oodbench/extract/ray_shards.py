"""Sharded extraction on Ray: the shards of one (model, source) as Ray tasks on many GPUs or nodes.

``extract(model, source, executor="ray")`` (or ``executor=RayShards(...)``) cuts the pass into
the cache entry's shard ranges (:mod:`oodbench.extract.sharding`) and runs each range as one Ray
task (``num_gpus`` GPUs each, or ``num_cpus`` CPUs on a CPU cluster):

- the driver (the process that called ``extract``) holds the entry's lock, decides the shard
  size once (``shard_size=``, the size an interrupted run already recorded, or the first batch
  timed in a first task: on a cluster the driver may have no GPU), submits one task per shard
  still missing, and is the only writer of the manifest: it records each shard (rows, skipped
  images, file checksums) as its task returns and finalises the entry once, exactly as a
  single-process run does (``ActivationStore.finalize``);
- a task writes only its shard's files (atomically) into the same content-addressed entry, so
  the workers need the cache on storage they share with the driver (``OODBENCH_CACHE``);
- a task whose worker dies (killed, out of memory, a lost node) is run again by Ray
  (``max_retries``); an error raised by the model or the data (``NonFiniteError``, ...) is not
  retried: the driver cancels the other tasks and raises it, keeping the shards done so far;
- a re-run (after Ctrl-C, or a killed driver) resumes from the shards the manifest records,
  whether they were written by Ray tasks or by a single process, and vice versa: the cache key
  does not depend on the executor.

Why tasks and not Ray Data: the cache already cuts the work into fixed, recorded ranges whose
completion must be recorded exactly once, and a resumed run must redo exactly the missing
ones. One task per range maps that one to one and uses Ray's own retry of a dead worker's
task; Ray Data's ``map_batches`` would stream rows through its own blocks, whose boundaries,
retries and output location are Ray's to choose, and the shard bookkeeping would have to be
rebuilt on top of it. A task gets the model through the object store (``ray.put`` once per
extraction) and a worker process keeps the last model it deserialised, so consecutive shards on
one worker do not load it again.

Bit for bit: the shard size is a whole number of batches, so every task runs the batches
``[j * batch_size, (j + 1) * batch_size)`` of a single-process run, and the arrays are
identical to a single-process extraction on the same kind of device with the same kernel
configuration. On the CPU that includes the number of torch threads: a task runs with
``num_cpus`` threads (Ray sets ``OMP_NUM_THREADS`` the same way), and a real network's float32
sums can differ in the last bit between 1 and 2 threads, so compare with a single process run
at ``torch.set_num_threads(num_cpus)``. On CUDA the caveats of :mod:`oodbench.extract.engine`
apply (cuDNN's kernel choice).

Install with ``pip install oodbench[ray]``. ``extract`` connects to the running Ray instance
(``ray.init`` was called, or this is a Ray worker, as in ``oodbench run --ray``), else to
``RayShards.address`` (``None`` starts a local instance).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch

from oodbench.errors import (
    Interrupted,
    InvalidInputError,
    MissingDependencyError,
    UnknownNameError,
)
from oodbench.extract.forward import Chunk, ForwardPass, fresh_timings
from oodbench.extract.progress import progress_bar
from oodbench.extract.runtime import resolve_amp, resolve_device
from oodbench.extract.sharding import measure_shard_size, shard_bounds
from oodbench.extract.store import ActivationStore

EXECUTORS = ("local", "ray")


@dataclass(frozen=True)
class RayShards:
    """How ``extract(..., executor=RayShards(...))`` runs the shards on Ray.

    Attributes:
        num_gpus: GPUs per shard task; ``None``: 1 when the cluster has GPUs, else 0.
        num_cpus: CPUs per shard task; ``None``: 1 on a CPU cluster; with GPUs, the CPUs per
            GPU of the scarcest GPU node (for the task's DataLoader workers: ``num_workers=
            "auto"`` in a GPU task is ``num_cpus - 1``, at most 16). On the CPU a task runs
            torch with ``num_cpus`` threads.
        max_retries: how often Ray runs a shard again when its worker dies.
        address: the Ray cluster to connect to when Ray is not initialised yet (``None``
            starts a local one, ``"auto"`` finds a running one).
    """

    num_gpus: float | None = None
    num_cpus: float | None = None
    max_retries: int = 3
    address: str | None = None


def ray_driver(executor: str | RayShards, cache: bool) -> RayShardDriver | None:
    """The driver for ``executor`` (``None`` for ``"local"``); checks the value, starts nothing."""
    if isinstance(executor, RayShards):
        options = executor
    elif executor == "local":
        return None
    elif executor == "ray":
        options = RayShards()
    else:
        raise UnknownNameError("executor", str(executor), EXECUTORS)
    if not cache:
        raise InvalidInputError(
            "executor='ray' writes the shards into the activation cache, which the workers "
            "share; use cache=True (the default), or executor='local' with cache=False"
        )
    for name in ("num_gpus", "num_cpus"):
        value = getattr(options, name)
        if value is not None and (isinstance(value, bool) or not value >= 0):
            raise InvalidInputError(f"RayShards.{name} must be a number >= 0; got {value!r}")
    if isinstance(options.max_retries, bool) or not isinstance(options.max_retries, int) \
            or options.max_retries < 0:
        raise InvalidInputError(
            f"RayShards.max_retries must be an integer >= 0; got {options.max_retries!r}"
        )
    return RayShardDriver(options)


def import_ray() -> Any:
    """The ``ray`` module, or a ``MissingDependencyError`` naming the extra."""
    try:
        import ray
    except ImportError:
        raise MissingDependencyError(
            "running on Ray needs the 'ray' package: pip install oodbench[ray] "
            "(or run locally: executor='local' / without --ray)"
        ) from None
    return ray


class RayShardDriver:
    """The driver's side of a sharded extraction (see the module docstring)."""

    def __init__(self, options: RayShards):
        self.options = options
        self.num_gpus = 0.0
        self.num_cpus = 1.0
        self.slots = 1

    def connect(self) -> Any:
        """Connect to Ray (once) and fix the resources of a shard task; returns ``ray``."""
        ray = import_ray()
        if not ray.is_initialized():
            ray.init(address=self.options.address, ignore_reinit_error=True)
        total = ray.cluster_resources()
        gpus, cpus = float(total.get("GPU", 0)), float(total.get("CPU", 0))
        self.num_gpus = float((1 if gpus else 0) if self.options.num_gpus is None
                              else self.options.num_gpus)
        self.num_cpus = float(self.options.num_cpus if self.options.num_cpus is not None
                              else _cpus_per_gpu(ray) if self.num_gpus else 1)
        if self.num_gpus > gpus or self.num_cpus > cpus:
            raise InvalidInputError(
                f"a shard task asks for {self.num_gpus:g} GPU(s) and {self.num_cpus:g} CPU(s) but "
                f"the Ray cluster has {gpus:g} GPU(s) and {cpus:g} CPU(s) in all; lower "
                "RayShards(num_gpus=..., num_cpus=...) or add nodes"
            )
        per_slot = [cpus / self.num_cpus if self.num_cpus else math.inf,
                    gpus / self.num_gpus if self.num_gpus else math.inf]
        self.slots = max(1, int(min(per_slot))) if min(per_slot) < math.inf else 1
        return ray

    def runtime(self, device: str | torch.device, amp: str) -> tuple[torch.device, torch.dtype | None]:
        """The device kind the tasks run on and the autocast dtype, as a task resolves them."""
        ray = self.connect()
        kind = "cuda" if self.num_gpus else "cpu"
        if not (isinstance(device, str) and device == "auto"):
            try:
                asked = torch.device(device)
            except (RuntimeError, TypeError):
                asked = resolve_device(device)  # raises the error that names the choices
            if asked.type == "cuda" and (asked.index is not None or not self.num_gpus):
                raise InvalidInputError(
                    f"device {str(device)!r} with executor='ray': each shard task uses the GPU Ray "
                    "gives it; use device='auto' or 'cuda' and RayShards(num_gpus=1) (or more)"
                )
            kind = asked.type
        dev = torch.device(kind)
        if kind == "cuda" and amp == "auto":  # bf16 or fp16: the GPU decides, ask one
            probe = ray.remote(num_gpus=self.num_gpus, num_cpus=self.num_cpus)(_task_runtime)
            return dev, _get(ray, probe.remote(amp))
        return dev, resolve_amp(amp, dev)

    def measure_shard_size(self, run: ForwardPass) -> tuple[int, Chunk | None, dict[str, Any]]:
        """The shard size from the first batch timed in a task (its output is not kept), at most
        an even share of the source per task slot so that every slot gets work."""
        ray = self.connect()
        task = ray.remote(num_gpus=self.num_gpus, num_cpus=self.num_cpus)(_task_shard_size)
        size, sizing = _get(ray, task.remote([ray.put(_shipped(run))], self.num_cpus))
        share = math.ceil(math.ceil(len(run.source) / self.slots) / run.batch_size) * run.batch_size
        return min(size, share), None, {**sizing, "ray_task_slots": self.slots}

    def write_shards(self, run: ForwardPass, store: ActivationStore, manifest: dict[str, Any]) -> None:
        """Run every shard the manifest does not hold as a Ray task; record each as it returns."""
        ray = self.connect()
        n = len(run.source)
        todo = [s for s in shard_bounds(n, manifest["shard_size"]) if str(s[0]) not in manifest["shards"]]
        done = n - sum(hi - lo for _, lo, hi in todo)
        task = ray.remote(num_gpus=self.num_gpus, num_cpus=self.num_cpus,
                          max_retries=self.options.max_retries)(_task_shard)
        box = [ray.put(_shipped(run))]  # in a list, so that a task receives the reference
        pending = {task.remote(box, str(store.path), index, lo, hi, self.num_cpus): hi - lo
                   for index, lo, hi in todo}
        run.timings["shard_tasks"] = len(todo)
        description = f"extract {run.model.spec} on {run.source.name} ({len(todo)} Ray tasks)"
        try:
            with progress_bar(description, n, done, run.progress) as advance:
                while pending:
                    (ref,), _ = ray.wait(list(pending), num_returns=1)
                    images = pending.pop(ref)
                    index, record, timings = _get(ray, ref)
                    store.record_shard(manifest, index, record)
                    for name, value in timings.items():
                        run.timings[name] += value
                    advance(images)
        except BaseException as err:
            for ref in pending:
                ray.cancel(ref)
            if isinstance(err, KeyboardInterrupt) and not isinstance(err, Interrupted):
                raise Interrupted(
                    f"{len(manifest['shards'])} of {manifest['n_shards']} shards of the "
                    f"extraction are kept in {store.path}; run the same extraction again to resume"
                ) from err
            raise


def _cpus_per_gpu(ray: Any) -> float:
    """CPUs per GPU on the GPU node that has the fewest (at least 1)."""
    ratios = [node["Resources"].get("CPU", 0) // node["Resources"]["GPU"]
              for node in ray.nodes() if node.get("Alive") and node["Resources"].get("GPU")]
    return max(1.0, float(min(ratios, default=1)))


def _get(ray: Any, ref: Any) -> Any:
    """``ray.get``, raising a task's own exception (e.g. ``NonFiniteError``) rather than Ray's
    wrapper, so callers see the same errors as with a local extraction."""
    try:
        return ray.get(ref)
    except ray.exceptions.RayTaskError as err:
        cause = getattr(err, "cause", None)
        if isinstance(cause, Exception):
            raise cause from err
        raise


def _shipped(run: ForwardPass) -> ForwardPass:
    """What goes to the tasks: the pass without a progress bar and with fresh timings."""
    return replace(run, progress=False, timings={})


# ---------------------------------------------------------------------------------------------
# the task side (runs in a Ray worker process)

#: the last pass a worker deserialised: (object reference id, pass)
_WORKER_PASS: dict[str, ForwardPass] = {}


def _worker_pass(box: list[Any], num_cpus: float) -> ForwardPass:
    """The pass of ``box[0]`` set up in this worker: its own device (Ray makes the task's GPU
    ``cuda:0``), ``num_cpus`` torch threads on the CPU, DataLoader workers from the task's CPUs."""
    import ray

    ref = box[0]
    key = ref.hex()
    if key not in _WORKER_PASS:
        _WORKER_PASS.clear()
        _WORKER_PASS[key] = ray.get(ref)
    run = _WORKER_PASS[key]
    device = resolve_device(run.device.type)
    workers = run.num_workers
    if device.type == "cpu":
        torch.set_num_threads(max(1, int(num_cpus)))
        workers = 0 if workers == "auto" else workers
    elif workers == "auto":
        workers = min(16, max(0, int(num_cpus) - 1))
    return replace(run, device=device, num_workers=workers, timings=fresh_timings())


def _task_runtime(amp: str) -> torch.dtype | None:
    return resolve_amp(amp, resolve_device("cuda"))


def _task_shard_size(box: list[Any], num_cpus: float) -> tuple[int, dict[str, Any]]:
    size, _, sizing = measure_shard_size(_worker_pass(box, num_cpus))
    return size, sizing


def _task_shard(box: list[Any], store_path: str, index: int, lo: int, hi: int,
                num_cpus: float) -> tuple[int, dict[str, Any], dict[str, float]]:
    """Compute shard ``index`` (source positions ``[lo, hi)``) and write its files; returns the
    index, the shard's manifest record and the task's timings."""
    run = _worker_pass(box, num_cpus)
    ((_, arrays, skipped),) = run.shards([(index, lo, hi)], 0)
    tic = time.perf_counter()
    record = ActivationStore(Path(store_path)).write_shard_files(index, arrays, skipped)
    run.timings["write_s"] += time.perf_counter() - tic
    return index, record, run.timings
