"""Shared fixtures: an isolated cache per test session and the optional ../shared/data."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"


@pytest.fixture(autouse=True, scope="session")
def _isolated_cache(tmp_path_factory: pytest.TempPathFactory):
    """Every test writes its cache under a temporary folder, never under ~/.cache."""
    old = os.environ.get("OODBENCH_CACHE")
    os.environ["OODBENCH_CACHE"] = str(tmp_path_factory.mktemp("oodbench-cache"))
    yield
    if old is None:
        os.environ.pop("OODBENCH_CACHE", None)
    else:
        os.environ["OODBENCH_CACHE"] = old


#: tests that share one session fixture, or a resource, run on one pytest-xdist worker
#: (``TEST_WORKERS=N make test`` runs ``pytest -n N --dist loadgroup``): the fixture is built
#: once, and two local Ray clusters never start side by side
XDIST_GROUPS = {
    "lite0_imagenet_val": "lite0",  # the 1,300-image extraction
    "quick_tour_run": "quick-tour",  # the README's quick tour (with `oodbench demo`)
    "gloo_runs": "gloo",  # the one torchrun launch of the two-process training tests
}
RAY_MODULES = ("test_ray_shards.py", "test_ray_executor.py")


def pytest_configure(config: pytest.Config) -> None:
    """A pytest-xdist worker computes with one thread (torch, OpenMP and the BLAS of NumPy and
    faiss): ``make test`` runs one worker more than the cores, and workers of two threads each on two
    cores spend their time waiting on each other's spinning threads. Tests that need several
    threads set them themselves (``torch.set_num_threads(2)`` in tests/test_compute.py)."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return
    for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(name, "1")  # for the subprocesses a test starts, too
    import threadpoolctl
    import torch

    torch.set_num_threads(1)
    threadpoolctl.threadpool_limits(1)


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's own hook turns the marks into groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Put the tests of ``XDIST_GROUPS`` and ``RAY_MODULES`` into their pytest-xdist groups."""
    for item in items:
        fixtures = set(getattr(item, "fixturenames", ()))
        group = next((g for name, g in XDIST_GROUPS.items() if name in fixtures), None)
        if group is None and item.path.name in RAY_MODULES:
            group = "ray"
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))


def shared_path(*parts: str) -> Path:
    """A path under ../shared/data; skips the test with a reason when it is absent."""
    path = SHARED_DATA.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"reference data {path} is absent (only in the project's own checkouts)")
    return path


@pytest.fixture(scope="session")
def lite0_imagenet_val(_isolated_cache):
    """EfficientNet-Lite0 (real weights) on the 1,300 real ImageNet validation images.

    One extraction per test session (logits, features, float16 feature maps), shared by every
    test that needs real activations: later ``extract`` calls with the same source and capture
    are cache hits. Returns ``(model, source, activations)``.
    """
    path = shared_path("imagenet-val-1300")
    from oodbench.data.imagenet_val import ImageNetVal
    from oodbench.extract import extract
    from oodbench.models import load

    model = load("efficientnet_lite0")
    source = ImageNetVal(path)
    # batches of 8: on one CPU thread Lite0 costs ~34 ms per image in batches of 8 against ~69
    # in the default 64 (its depthwise activations stay in cache; bench_memory_format.py)
    acts = extract(model, source, capture=("logits", "features", "feature_map"),
                   feature_map_dtype="float16", batch_size=8, progress=False)
    return model, source, acts


@pytest.fixture
def imagenet_val_1300() -> Path:
    return shared_path("imagenet-val-1300")


@pytest.fixture
def cifar10_test() -> Path:
    return shared_path("cifar10-test")


@pytest.fixture
def cood_paper_csv() -> Path:
    return shared_path("cood_paper_results.csv")


@pytest.fixture
def one_thread():
    """torch with one intra-op thread in the test (bit-identical comparisons; tiny models)."""
    from oodbench.extract.runtime import torch_threads

    with torch_threads(1):
        yield


@pytest.fixture(scope="session")
def quick_tour_run(_isolated_cache, tmp_path_factory: pytest.TempPathFactory):
    """The README's quick tour, run once per session in a fresh folder (``tests/_quick_tour.py``);
    its ``failure`` says which command failed."""
    from tests._quick_tour import run_quick_tour

    return run_quick_tour(tmp_path_factory.mktemp("quick-tour"))
