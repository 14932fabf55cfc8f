"""NPOS outlier synthesis: per-class FIFO queues, boundary points, Gaussian samples, rejection.

Tao, Du, Zhu & Li, "Non-Parametric Outlier Synthesis", ICLR 2023 (arXiv 2303.02966), Sec. 3;
checked against the official code (github.com/deeplearning-wisc/npos,
``CLIP_based/OOD/KNN.py``: ``generate_outliers``, ``KNN_dis_search_decrease``,
``KNN_dis_search_distance``; the queue in ``train_npos.py``). For each class c with queue
Q_c = (q_1 .. q_n) of ID embeddings and q^ = q / ||q||:

    d_k(x)    = the k-th smallest squared distance ||x^ - q^_j||^2 over j = 1..n
                (the queue holds the query itself, so its own 0 counts, as in the faiss
                search of the official code; squared or not, the order is the same)
    boundary  = the ``boundary`` queue points with the largest d_k (sorted, largest first)
    b         = boundary[r], r uniform in [0, boundary)                 (``pick_nums = 1``)
    v_s       = b + sigma * e_s,  e_s ~ N(0, I_D),  s = 1..samples      (one e per step, shared
                                                                         by every class)
    outliers  = the ``keep`` v_s with the largest d_k(v_s)              (rejection: keep the
                                                                         least likely)

Space: the paper describes the synthesis on normalised embeddings; the official code queues the
raw projected embeddings, normalises them only for the k-NN search, draws the Gaussian around
the raw boundary embedding and feeds the raw samples to phi. oodbench does what the code does
(the sigma = 0.1 default belongs to that scale).

Queue (the official ``number_dict`` / ``data_dict`` logic): while any class holds fewer than n
embeddings, each sample of a batch is written into its class's queue if that one is not full
(later ones are dropped); from the step on which every queue is full, each sample pushes out
its class's oldest embedding (in batch order). Outliers are synthesised at a step only when all
queues were full before it and the epoch is at least ``start_epoch``, after the batch entered
the queues.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


class ClassQueues:
    """``num_classes`` FIFO queues of ``size`` embeddings of width ``dim`` (see module doc)."""

    def __init__(self, num_classes: int, size: int, dim: int, device: torch.device | str = "cpu"):
        self.size = size
        self.data = torch.zeros(num_classes, size, dim, device=device)
        self.counts = torch.zeros(num_classes, dtype=torch.int64, device=device)

    @property
    def full(self) -> bool:
        return bool((self.counts == self.size).all())

    def push(self, embeddings: torch.Tensor, labels: torch.Tensor) -> None:
        """Add a batch (in batch order): fill while any queue has room, then FIFO."""
        embeddings = embeddings.detach().to(self.data)
        labels = labels.to(self.counts.device)
        fifo = self.full
        for c in torch.unique(labels).tolist():
            new = embeddings[labels == c]
            if fifo:
                keep = self.size - min(len(new), self.size)
                self.data[c] = torch.cat([self.data[c, self.size - keep:], new[len(new) - (self.size - keep):]])
            else:
                start = int(self.counts[c])
                take = min(len(new), self.size - start)
                self.data[c, start : start + take] = new[:take]
                self.counts[c] = start + take

    def state(self) -> dict[str, torch.Tensor]:
        return {"queue.data": self.data, "queue.counts": self.counts}

    def load(self, state: dict[str, torch.Tensor]) -> None:
        self.data.copy_(state["queue.data"])
        self.counts.copy_(state["queue.counts"])


def kth_distance(points: torch.Tensor, queue: torch.Tensor, k: int) -> torch.Tensor:
    """d_k of each point (batched: ``points`` (..., m, D), ``queue`` (..., n, D)) -> (..., m)."""
    a, q = F.normalize(points, dim=-1), F.normalize(queue, dim=-1)
    squared = ((a * a).sum(-1, keepdim=True) + (q * q).sum(-1).unsqueeze(-2)
               - 2 * a @ q.transpose(-1, -2)).clamp_min(0)
    return squared.kthvalue(k, dim=-1).values


def synthesize(queues: torch.Tensor, noise: torch.Tensor, picks: torch.Tensor, *, k: int,
               boundary: int, sigma: float, keep: int) -> torch.Tensor:
    """The outliers of every class, ``(C * keep, D)`` in class order (see module doc).

    Args:
        queues: (C, n, D) raw ID embeddings per class.
        noise: (samples, D) standard normal draws, shared by every class.
        picks: (C,) which boundary point (its rank in [0, boundary)) each class samples around.
    """
    out = []
    for c in range(len(queues)):  # one class at a time: (samples, n) distances, not (C, ...)
        q = queues[c]
        rank = kth_distance(q, q, k).topk(boundary).indices
        centre = q[rank[picks[c]]]
        candidates = centre + sigma * noise
        out.append(candidates[kth_distance(candidates, q, k).topk(keep).indices])
    return torch.cat(out)


def draw(num_classes: int, dim: int, *, samples: int, boundary: int,
         generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """One step's random draws: ``noise`` (samples, D) ~ N(0, I) and ``picks`` (C,) uniform."""
    noise = torch.randn(samples, dim, generator=generator)
    picks = torch.randint(boundary, (num_classes,), generator=generator)
    return noise, picks
