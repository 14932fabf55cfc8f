"""NegLabel: negative labels mined from WordNet for CLIP zero-shot OOD detection.

Jiang et al., "Negative Label Guided OOD Detection with Pretrained Vision-Language Models",
ICLR 2024 (arXiv 2403.20078). Defaults follow the published ImageNet configuration.

Mining (``fit``): every candidate word w (WordNet nouns with the prompt ``"the nice {}"``,
adjectives with ``"This is a {} photo"``) is embedded with CLIP's text encoder; its affinity to
the ID labels is the ``percentile``-quantile (0.95) of its cosines to all ID label embeddings
(positives, prompt ``"the nice {}"``). Nouns and adjectives are ranked separately and the
``neg_fraction`` (15 %) with the lowest affinity are kept (about 10,000 nouns for ImageNet).

Score, for normalised image embedding f, positives p_i, negatives n_j, tau = 0.01 (the code's
``100 * cos`` with t = 1):

    S(f) = sum_i e^{cos(f,p_i)/tau} / (sum_i e^{cos(f,p_i)/tau} + sum_j e^{cos(f,n_j)/tau})

Grouping: the last ``M mod n_groups`` negatives are dropped, the rest permuted (seeded), split into
``n_groups`` (100) equal groups, S computed against each group, and the mean taken. Computed
stably as ``mean_g sigmoid(LSE_i(pos) - LSE_j(neg_g))``. With ``n_groups=1`` all negatives are
used. Higher = more in-distribution. The permutation uses torch's CPU generator, so the groups are
not the same random groups as the published CUDA run (the score is an average over groups and
insensitive to that at ImageNet scale).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from oodbench.data.vocabulary import load_vocabulary
from oodbench.detectors._math import as_tensor
from oodbench.detectors.base import Detector, register
from oodbench.errors import InvalidInputError
from oodbench.extract.activations import Activations


def mine_negative_labels(
    positives: torch.Tensor, candidates: torch.Tensor, *, fraction: float, percentile: float
) -> np.ndarray:
    """Indices of the ``fraction`` of ``candidates`` farthest from the ID labels, farthest first.

    Affinity of candidate j = the ``percentile``-quantile over ID labels i of cos(c_j, p_i)
    (inputs are L2-normalised embeddings); keep the ``int(len * fraction)`` lowest.
    """
    if len(candidates) == 0:
        return np.zeros(0, dtype=np.int64)
    affinity = torch.quantile((candidates.double() @ positives.double().T), percentile, dim=1)
    order = torch.argsort(affinity, stable=True)
    return order[: int(len(candidates) * fraction)].numpy()


@register
@dataclass
class NegLabel(Detector):
    """Positive-label softmax mass against WordNet negative labels far from the ID classes (CLIP)."""

    name = "neglabel"
    requires = frozenset({"features", "text_embeddings"})
    paper = "Jiang et al., ICLR 2024, arXiv 2403.20078"
    score_only_hyperparams = frozenset({"temperature", "chunk_size"})

    neg_fraction: float = 0.15
    percentile: float = 0.95
    n_groups: int = 100
    temperature: float = 0.01
    positive_prompt: str = "the nice {}"
    noun_prompt: str = "the nice {}"
    adj_prompt: str = "This is a {} photo"
    vocabulary: str | None = None
    seed: int = 0
    chunk_size: int = 4096

    def _fit(self, train: Activations | None, model: object) -> None:
        if not 0 < self.neg_fraction <= 1 or not 0 <= self.percentile <= 1 or self.n_groups < 1:
            raise InvalidInputError(
                "neglabel needs 0 < neg_fraction <= 1, 0 <= percentile <= 1 and n_groups >= 1; got "
                f"{self.neg_fraction}, {self.percentile}, {self.n_groups}"
            )
        names = getattr(model, "class_names", None)
        if not names:
            raise InvalidInputError("neglabel needs the CLIP classifier's class names (model.class_names)")
        encode = model.encode_text  # type: ignore[attr-defined]
        positives = encode([self.positive_prompt.format(c) for c in names]).cpu()
        words = load_vocabulary(self.vocabulary)
        kept_words: list[str] = []
        kept: list[torch.Tensor] = []
        for pos, prompt in (("noun", self.noun_prompt), ("adj", self.adj_prompt)):
            emb = encode([prompt.format(w) for w in words[pos]]).cpu()
            idx = mine_negative_labels(positives, emb, fraction=self.neg_fraction, percentile=self.percentile)
            kept.append(emb[idx])
            kept_words += [words[pos][i] for i in idx]
        negatives = torch.cat(kept)
        if len(negatives) < self.n_groups:
            raise InvalidInputError(
                f"neglabel mined {len(negatives)} negative labels, fewer than n_groups={self.n_groups}: "
                "use a larger vocabulary or neg_fraction, or fewer groups"
            )
        self.positives_ = positives.double()
        self.negatives_ = negatives.double()
        self.negative_words_ = kept_words
        usable = len(negatives) - len(negatives) % self.n_groups
        gen = torch.Generator().manual_seed(self.seed)
        self.group_order_ = torch.randperm(usable, generator=gen) if self.n_groups > 1 else None

    def _score(self, acts: Activations) -> np.ndarray:
        feats = as_tensor(acts.features)  # type: ignore[arg-type]
        out = []
        for start in range(0, len(feats), self.chunk_size):
            f = torch.nn.functional.normalize(feats[start : start + self.chunk_size], dim=1)
            lse_pos = torch.logsumexp(f @ self.positives_.T / self.temperature, dim=1, keepdim=True)
            neg = f @ self.negatives_.T / self.temperature
            if self.group_order_ is not None:
                neg = neg[:, self.group_order_].reshape(len(f), self.n_groups, -1)
            else:
                neg = neg.unsqueeze(1)
            lse_neg = torch.logsumexp(neg, dim=2)
            out.append(torch.sigmoid(lse_pos - lse_neg).mean(dim=1))
        return torch.cat(out).numpy()
