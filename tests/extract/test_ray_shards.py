"""Sharded extraction on Ray: bit-identical to a single process, after a killed worker too, and
resumable after an interrupted driver (a local Ray cluster with 2 CPU workers).

Bit-identical comparisons here are between extractions in this process (or in a child
process set to the same thread count) over the same batches: the same operations in the same
order, so they hold on any CPU, whose kernels change both sides alike.
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from oodbench.errors import (
    InvalidInputError,
    MissingDependencyError,
    NonFiniteError,
    UnknownNameError,
)
from oodbench.extract import RayShards, extract
from oodbench.extract.store import ActivationStore
from tests.conftest import REPO
from tests.extract._toy import CountingNet, KillOnceNet, NanNet, RandomImages, TinyNet

ALL = ("logits", "features", "feature_map")
FIELDS = (*ALL, "labels", "ids", "source_indices")
N, BATCH, SHARD = 40, 4, 8  # 5 shards of 2 batches
CORRUPT = (3, 21)
HAVE_RAY = importlib.util.find_spec("ray") is not None
needs_ray = pytest.mark.skipif(not HAVE_RAY, reason="ray is not installed (pip install oodbench[ray])")


# ---------------------------------------------------------------------------------------------
# checks before anything runs (no Ray needed)


def test_unknown_executor_names_the_choices():
    with pytest.raises(UnknownNameError, match="Valid names: local, ray"):
        extract(TinyNet(), RandomImages(4), executor="dask", progress=False)


def test_ray_needs_the_cache():
    with pytest.raises(InvalidInputError, match="cache=True"):
        extract(TinyNet(), RandomImages(4), executor="ray", cache=False, progress=False)


@pytest.mark.parametrize("options", [RayShards(num_gpus=-1), RayShards(num_cpus=True),
                                     RayShards(max_retries=-1), RayShards(max_retries=1.5)])
def test_bad_ray_options_are_refused(options):
    with pytest.raises(InvalidInputError, match="RayShards"):
        extract(TinyNet(), RandomImages(4), executor=options, progress=False)


def test_without_ray_the_error_names_the_extra(monkeypatch: pytest.MonkeyPatch, cache_root: Path):
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` fails as if it were absent
    with pytest.raises(MissingDependencyError, match=r"pip install oodbench\[ray\]"):
        extract(TinyNet(), RandomImages(4), executor="ray", progress=False)
    assert not (cache_root / "activations").exists()  # nothing was written


# ---------------------------------------------------------------------------------------------
# on a local Ray cluster


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[None]:
    """A local Ray instance with 2 CPUs whose workers can import the tests' toy models."""
    import ray

    with pytest.MonkeyPatch.context() as patch:
        paths = [str(REPO), str(REPO / "src"), os.environ.get("PYTHONPATH", "")]
        patch.setenv("PYTHONPATH", os.pathsep.join(p for p in paths if p))  # inherited by workers
        patch.setenv("RAY_AUTH_MODE", "disabled")  # a private local instance
        # Ray starts its workers at niceness 15; beside the suite's other pytest-xdist workers
        # (niceness 0, both cores busy) they got a few per cent of a core: this module's 12
        # CPU-s took 190 s of wall time in the suite against 36 s alone
        patch.setenv("RAY_worker_niceness", "0")
        ray.init(num_cpus=2, include_dashboard=False, object_store_memory=100 * 2**20,
                 log_to_driver=False)
        try:
            yield
        finally:
            ray.shutdown()


def _single_process(shard_size: int | None = SHARD):
    with pytest.warns(UserWarning):  # the corrupt images
        return extract(TinyNet(), RandomImages(N, corrupt=CORRUPT), capture=ALL, batch_size=BATCH,
                       shard_size=shard_size, cache=False, progress=False)


def _on_ray(model: TinyNet, shard_size: int | None = SHARD, **options):
    with pytest.warns(UserWarning):
        return extract(model, RandomImages(N, corrupt=CORRUPT), capture=ALL, batch_size=BATCH,
                       shard_size=shard_size, progress=False,
                       executor=RayShards(num_cpus=1, **options))


def _assert_identical(a, b) -> None:
    for name in FIELDS:
        assert np.array_equal(getattr(a, name), getattr(b, name)), name
    assert a.meta["skipped"] == b.meta["skipped"]


def _manifest(acts) -> dict:
    return json.loads((Path(acts.meta["cache_path"]) / "manifest.json").read_text())


@pytest.mark.parametrize("shard_size", [SHARD, None], ids=["fixed", "measured"])
@pytest.mark.heavy
@needs_ray
@pytest.mark.usefixtures("ray_cluster", "one_thread")
def test_sharded_equals_single_process(tmp_path: Path, shard_size: int | None):
    counter = tmp_path / "passes"
    sharded = _on_ray(CountingNet(counter), shard_size)
    reference = _single_process()
    _assert_identical(sharded, reference)
    manifest = _manifest(sharded)
    size = manifest["shard_size"]
    assert manifest["complete"] and size % BATCH == 0
    if shard_size is None:  # timed in a first task, then at most an even share per task slot
        assert manifest["shard_sizing"]["ray_task_slots"] == 2 and size <= N // 2
    tasks = -(-N // size)
    assert sharded.meta["timings"]["shard_tasks"] == tasks >= 2
    first_batch = 1 if shard_size is None else 0  # the sizing task's batch is not kept
    assert counter.stat().st_size == N // BATCH + first_batch  # each batch ran once
    # the same cache entry as a local extraction: a local call is a cache hit
    with pytest.warns(UserWarning):
        local = extract(TinyNet(), RandomImages(N, corrupt=CORRUPT), capture=ALL,
                        batch_size=BATCH, progress=False)
    assert local.meta["cache_hit"] and local.meta["cache_key"] == sharded.meta["cache_key"]


@pytest.mark.heavy
@needs_ray
@pytest.mark.usefixtures("ray_cluster", "one_thread")
def test_killed_worker_is_retried_and_the_result_is_bit_identical(tmp_path: Path):
    counter = tmp_path / "passes"
    kill_at = 4  # the 4th of 10 batches: mid-run, with tasks running on both workers
    sharded = _on_ray(KillOnceNet(counter, kill_at), max_retries=2)
    assert Path(f"{counter}.killed").exists()  # a worker process really died
    redone = counter.stat().st_size - N // BATCH
    assert 1 <= redone <= SHARD // BATCH  # the batches of the killed task's shard, run again
    _assert_identical(sharded, _single_process())


@pytest.mark.heavy
@needs_ray
@pytest.mark.usefixtures("ray_cluster", "one_thread")
def test_interrupted_driver_resumes_from_the_complete_shards(tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch):
    original = ActivationStore.record_shard
    recorded: list[int] = []

    def ctrl_c_after_two(self, manifest, index, record):
        if len(recorded) == 2:
            raise KeyboardInterrupt
        recorded.append(index)
        original(self, manifest, index, record)

    monkeypatch.setattr(ActivationStore, "record_shard", ctrl_c_after_two)
    with pytest.raises(KeyboardInterrupt, match="2 of 5 shards of the extraction are kept"):
        _on_ray(CountingNet(tmp_path / "first"))
    monkeypatch.setattr(ActivationStore, "record_shard", original)
    counter = tmp_path / "second"
    resumed = _on_ray(CountingNet(counter))
    timings = resumed.meta["timings"]
    assert timings["shard_tasks"] == 3  # only the shards missing from the manifest ran
    kept_rows = sum(1 for i in range(N) if i // SHARD in recorded and i not in CORRUPT)
    assert timings["images"] == N - len(CORRUPT) - kept_rows
    assert counter.stat().st_size == 3 * SHARD // BATCH
    _assert_identical(resumed, _single_process())


@pytest.mark.heavy
@needs_ray
@pytest.mark.usefixtures("ray_cluster", "one_thread")
def test_a_task_error_is_raised_as_itself_and_done_shards_are_kept(tmp_path: Path):
    with pytest.raises(NonFiniteError, match="NaN/inf logits"):  # not Ray's wrapper
        extract(NanNet(tmp_path / "passes", nan_at=7), RandomImages(N, corrupt=CORRUPT),
                capture=ALL, batch_size=BATCH, shard_size=SHARD, progress=False,
                executor=RayShards(num_cpus=1))
    (entry,) = (Path(os.environ["OODBENCH_CACHE"]) / "activations").iterdir()
    manifest = json.loads((entry / "manifest.json").read_text())
    assert not manifest["complete"] and manifest["shards"]  # finished shards are kept
    resumed = _on_ray(CountingNet(tmp_path / "again"))
    assert resumed.meta["timings"]["shard_tasks"] == 5 - len(manifest["shards"])
    _assert_identical(resumed, _single_process())


@pytest.mark.heavy
@needs_ray
@pytest.mark.usefixtures("ray_cluster")
def test_a_gpu_device_without_gpus_is_refused_before_any_task():
    with pytest.raises(InvalidInputError, match="num_gpus"):
        extract(TinyNet(), RandomImages(4), executor="ray", device="cuda", progress=False)
    with pytest.raises(InvalidInputError, match="cluster has 0 GPU"):
        extract(TinyNet(), RandomImages(4), executor=RayShards(num_gpus=1), progress=False)


_DRIVER = f"""
import sys
sys.path[:0] = [{str(REPO)!r}, {str(REPO / "src")!r}]
import ray
ray.init(address=sys.argv[1], log_to_driver=False)
from oodbench.extract import RayShards, extract
from tests.extract._toy import CountingNet, RandomImages
extract(CountingNet(sys.argv[2], delay=0.4), RandomImages({N}, corrupt={CORRUPT}), capture={ALL},
        batch_size={BATCH}, shard_size={SHARD}, progress=False, executor=RayShards(num_cpus=1))
"""


@pytest.mark.heavy
@needs_ray
@pytest.mark.usefixtures("ray_cluster", "one_thread")
def test_a_killed_driver_is_resumed_by_the_next_run(tmp_path: Path):
    """A driver process SIGKILLed after two shards were recorded; the next run (here, in this
    process) computes only the other shards and ends bit-identical."""
    import ray

    root = Path(os.environ["OODBENCH_CACHE"])
    child = subprocess.Popen([sys.executable, "-c", _DRIVER, ray.get_runtime_context().gcs_address,
                              str(tmp_path / "first")],
                             env={**os.environ, "PYTHONWARNINGS": "ignore"})
    try:
        # generous: on a loaded 2-core machine the driver's start (Ray, torch) took over 120 s
        deadline, recorded = time.monotonic() + 600, 0
        while time.monotonic() < deadline and child.poll() is None:
            found = list(root.glob("activations/*/manifest.json"))
            try:
                recorded = len(json.loads(found[0].read_text())["shards"]) if found else 0
            except ValueError:  # replaced while we read it
                continue
            if recorded >= 2:
                break
            time.sleep(0.01)
        assert child.poll() is None, "the driver finished before it could be killed"
        assert recorded >= 2, f"after 600 s the driver had recorded {recorded} shards, not 2"
        child.send_signal(signal.SIGKILL)
    finally:
        child.wait()
    kept = json.loads(found[0].read_text())["shards"]
    assert not json.loads(found[0].read_text())["complete"] and 2 <= len(kept) < 5
    counter = tmp_path / "second"
    resumed = _on_ray(CountingNet(counter))
    assert resumed.meta["timings"]["shard_tasks"] == 5 - len(kept)
    assert counter.stat().st_size == (5 - len(kept)) * SHARD // BATCH
    _assert_identical(resumed, _single_process())
