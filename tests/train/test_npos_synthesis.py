"""NPOS's queues, boundary selection, Gaussian sampling and rejection against brute-force
re-statements (loops over points, sorted distance lists) on small seeded tensors."""

import numpy as np
import torch

from oodbench.train.npos_synthesis import ClassQueues, draw, kth_distance, synthesize


def _unit(a: np.ndarray) -> np.ndarray:
    return a / np.linalg.norm(a, axis=-1, keepdims=True)


def brute_kth(point: np.ndarray, queue: np.ndarray, k: int) -> float:
    """The k-th smallest squared distance of normalised vectors, one pair at a time."""
    p = _unit(point)
    return sorted(float(np.sum((p - _unit(q)) ** 2)) for q in queue)[k - 1]


def brute_synthesis(queue, noise, pick, k, boundary, sigma, keep):
    kth = [brute_kth(q, queue, k) for q in queue]
    ranked = sorted(range(len(queue)), key=lambda i: -kth[i])[:boundary]
    centre = queue[ranked[pick]]
    candidates = [centre + sigma * e for e in noise]
    scores = [brute_kth(c, queue, k) for c in candidates]
    chosen = sorted(range(len(candidates)), key=lambda i: -scores[i])[:keep]
    return np.array([candidates[i] for i in chosen]), ranked


def test_kth_distance_matches_brute_force():
    rng = np.random.default_rng(0)
    queue, points = rng.normal(size=(30, 6)) * 3, rng.normal(size=(9, 6))
    got = kth_distance(torch.tensor(points), torch.tensor(queue), 4).numpy()
    # squared distances of unit vectors as 1 + 1 - 2 a.q: ~1e-15 absolute; the 4th-nearest
    # ones here are >= 0.68
    np.testing.assert_allclose(got, [brute_kth(p, queue, 4) for p in points], rtol=1e-10)
    # a queue point's own zero distance counts (the official faiss index holds the query)
    self_kth = kth_distance(torch.tensor(queue), torch.tensor(queue), 1).numpy()
    np.testing.assert_allclose(self_kth, 0, atol=1e-12)  # 1 + 1 - 2 a.a: ~1e-15, clamped at 0


def test_synthesis_matches_brute_force():
    rng = np.random.default_rng(1)
    classes, n, d = 3, 25, 5
    queues = rng.normal(size=(classes, n, d)) * rng.uniform(0.5, 3, size=(classes, n, 1))
    noise, picks = rng.normal(size=(40, d)), np.array([0, 3, 6])
    got = synthesize(torch.tensor(queues), torch.tensor(noise), torch.tensor(picks),
                     k=5, boundary=7, sigma=0.3, keep=2).numpy()
    assert got.shape == (classes * 2, d)
    for c in range(classes):
        expected, ranked = brute_synthesis(queues[c], noise, picks[c], 5, 7, 0.3, 2)
        # the same float64 centre + sigma * noise, chosen by ranks of k-NN distances (>= 0.43,
        # gaps far above their ~1e-15 rounding): equal to the last bits
        np.testing.assert_allclose(got[2 * c : 2 * c + 2], expected, rtol=1e-10)
        # the centre is the boundary point of the drawn rank; the outliers lie around it
        centre = queues[c][ranked[picks[c]]]
        assert np.all(np.abs(got[2 * c] - centre) <= 0.3 * np.abs(noise).max() + 1e-12)


def test_boundary_points_are_the_sparsest():
    """A tight cluster plus three far points: the boundary (largest k-NN distance) is the
    three far ones, so every outlier is drawn around one of them."""
    rng = np.random.default_rng(2)
    cluster = np.array([1.0, 0, 0]) + 0.01 * rng.normal(size=(20, 3))
    far = np.array([[0, 1.0, 0], [0, 0, 1.0], [0, -1.0, 0]])
    queue = torch.tensor(np.vstack([cluster, far]))[None]
    for pick in range(3):
        out = synthesize(queue, torch.zeros(4, 3), torch.tensor([pick]), k=3, boundary=3,
                         sigma=0.1, keep=1).numpy()
        assert min(np.abs(out[0] - f).max() for f in far) < 1e-12


def brute_queues(batches, classes, size):
    """train_npos.py's number_dict / data_dict logic, one sample at a time."""
    queue = {c: [] for c in range(classes)}
    for embeddings, labels in batches:
        full = all(len(queue[c]) == size for c in range(classes))
        for e, y in zip(embeddings, labels):
            if full:
                queue[y] = queue[y][1:] + [e]
            elif len(queue[y]) < size:
                queue[y].append(e)
    return queue


def test_queues_fill_then_fifo_like_the_official_code():
    rng = np.random.default_rng(3)
    classes, size = 3, 4
    batches = [(rng.normal(size=(n, 2)), rng.integers(0, classes, n))
               for n in (5, 9, 2, 7, 11, 3)]
    batches.insert(2, (rng.normal(size=(6, 2)), np.array([0, 1, 2, 2, 2, 2])))
    queues = ClassQueues(classes, size, 2)
    fills = []
    for embeddings, labels in batches:
        queues.push(torch.tensor(embeddings, dtype=torch.float32), torch.tensor(labels))
        fills.append(queues.full)
    expected = brute_queues(batches, classes, size)
    for c in range(classes):
        # float32 copies of float64 embeddings: 6e-8 relative
        np.testing.assert_allclose(queues.data[c].numpy(), np.array(expected[c]), rtol=1e-6)
    assert fills[-1] and not fills[0]
    # the state round-trips (what a checkpoint stores)
    other = ClassQueues(classes, size, 2)
    other.load(queues.state())
    assert torch.equal(other.data, queues.data) and torch.equal(other.counts, queues.counts)


def test_draws_are_seeded():
    a = draw(4, 3, samples=6, boundary=5, generator=torch.Generator().manual_seed(0))
    b = draw(4, 3, samples=6, boundary=5, generator=torch.Generator().manual_seed(0))
    assert all(torch.equal(x, y) for x, y in zip(a, b))
    assert a[0].shape == (6, 3) and a[1].shape == (4,) and int(a[1].max()) < 5
