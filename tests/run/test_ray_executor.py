"""The Ray executor: a clear error without ray; the same results as the local one with it."""

from __future__ import annotations

import importlib.util
import json
import shutil
import sys

import pytest

import oodbench
from oodbench.errors import MissingDependencyError
from oodbench.results.table import ResultsTable
from oodbench.run.experiment import load_experiment
from oodbench.run.plan import make_plan
from oodbench.run.ray_executor import RayExecutor
from tests.run.tiny import write_tiny_experiment

HAVE_RAY = importlib.util.find_spec("ray") is not None


def test_without_ray_the_error_names_the_extra(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` fails as if it were absent
    exp = load_experiment(write_tiny_experiment(tmp_path))
    with pytest.raises(MissingDependencyError, match=r"pip install oodbench\[ray\]"):
        RayExecutor().run(make_plan(exp), ResultsTable(tmp_path / "out"))
    assert not (tmp_path / "out" / "results").exists()


@pytest.mark.heavy
@pytest.mark.skipif(not HAVE_RAY, reason="ray is not installed (pip install oodbench[ray])")
def test_ray_gives_the_local_results(tmp_path, monkeypatch):
    """Model tasks whose extractions run as Ray shard tasks (``oodbench run --ray``) give the
    local run's values exactly."""
    import ray

    monkeypatch.setenv("OODBENCH_CACHE", str(tmp_path / "local_cache"))
    path = write_tiny_experiment(tmp_path)
    local = oodbench.run_experiment(path, progress=False)
    shutil.rmtree(tmp_path / "out" / "results")
    ray_cache = tmp_path / "ray_cache"  # nothing cached: every extraction runs on Ray
    monkeypatch.setenv("OODBENCH_CACHE", str(ray_cache))
    monkeypatch.setenv("RAY_worker_niceness", "0")  # as tests/extract/test_ray_shards.py says
    ray.init(num_cpus=1, include_dashboard=False, object_store_memory=100 * 2**20)
    try:
        remote = oodbench.run_experiment(path, executor="ray", progress=False)
    finally:
        ray.shutdown()
    key = ["cell", "group", "metric"]
    a = local.sort_values(key).reset_index(drop=True)
    b = remote.sort_values(key).reset_index(drop=True)
    assert a[[*key, "status"]].equals(b[[*key, "status"]])
    assert a["value"].equals(b["value"])
    manifests = [json.loads(p.read_text()) for p in ray_cache.glob("activations/*/manifest.json")]
    assert len(manifests) == 5  # id fit, id test, pool, noise, stripes
    assert all(m["complete"] and m["timings"]["shard_tasks"] >= 1 for m in manifests)
