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

**A fixed negative list** (``negatives = "FILE"``): instead of mining, the prompts of a file are
the negatives, each encoded as it stands (no template applied): a ``.npy`` array of strings, or
a ``.txt`` file with one prompt per line (blank lines skipped). This is how CMA (Kim et al.,
CVPR 2025) scores as published: the official ``inference.py`` (ma-kjh/CMA-OoDD, lines 41 and
62-124) encodes the 10,000 prompts of ``Neglabel/neg_label_10000.npy`` as they are (8,500 "The
nice X" nouns, 1,500 "This is a X photo" adjectives), the ID classes as "The nice {}", and
scores the softmax mass of the ID columns of ``[cos(f, ID), cos(f, neg)] / 0.01`` -- one group,
T = 0.01: :data:`CMA_SCORING` (with ``negatives`` the path of that file).

Grouping: the last ``M mod n_groups`` negatives are dropped, the rest permuted (seeded), split into
``n_groups`` (100) equal groups, S computed against each group, and the mean taken. Computed
stably as ``mean_g sigmoid(LSE_i(pos) - LSE_j(neg_g))``. With ``n_groups=1`` all negatives are
used. Higher = more in-distribution. The permutation uses torch's CPU generator, so the groups are
not the same random groups as the published CUDA run (the score is an average over groups and
insensitive to that at ImageNet scale).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import torch

from oodbench.constraints import Integer, Interval, Positive, Seed, Text, Validated
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


#: NegLabel as CMA's official inference.py scores (lines 41, 62-64, 72-73, 117-128): one group,
#: T = 0.01, ID prompts "The nice {}"; give ``negatives`` the path of ``neg_label_10000.npy``
CMA_SCORING = {"n_groups": 1, "temperature": 0.01, "positive_prompt": "The nice {}"}
#: a prompt, with {} for the class name or word
Prompt = Annotated[str, Text("a prompt with {} for the word")]
#: the file types ``negatives`` reads
NEGATIVE_SUFFIXES = (".npy", ".txt")


def read_negative_prompts(path: str | Path) -> list[str]:
    """The prompts of a fixed negative list: a 1-D ``.npy`` array of strings or a ``.txt`` file
    with one prompt per line (blank lines skipped); a one-line ``InvalidInputError`` for a
    missing, empty or malformed file."""
    file = Path(path)
    where = f"neglabel: negatives file {str(file)!r}"
    if file.suffix not in NEGATIVE_SUFFIXES:
        raise InvalidInputError(f"{where}: expected a .npy array of strings or a .txt file with "
                                "one prompt per line")
    if not file.is_file():
        raise InvalidInputError(f"{where} does not exist; give the path of the negative list "
                                "(e.g. CMA's Neglabel/neg_label_10000.npy)")
    if file.suffix == ".txt":
        try:
            prompts = [line.strip() for line in file.read_text(encoding="utf-8").splitlines()]
        except UnicodeDecodeError as err:
            raise InvalidInputError(f"{where} is not UTF-8 text ({err.reason})") from None
        prompts = [p for p in prompts if p]
    else:
        try:
            array = np.load(file, allow_pickle=False)
        except (ValueError, OSError) as err:
            raise InvalidInputError(f"{where} is not a readable .npy array of strings "
                                    f"({str(err).splitlines()[0]})") from None
        if array.ndim != 1 or array.dtype.kind not in "US":
            raise InvalidInputError(f"{where} holds a {array.dtype} array of shape "
                                    f"{array.shape}; expected a 1-D array of strings")
        prompts = [str(p.decode() if isinstance(p, bytes) else p).strip() for p in array]
        empty = [i for i, p in enumerate(prompts) if not p]
        if empty:
            raise InvalidInputError(f"{where}: entry {empty[0]} is empty ({len(empty)} empty "
                                    "entries); every entry must be a prompt")
    if not prompts:
        raise InvalidInputError(f"{where} holds no prompts")
    return prompts


@register
@dataclass
class NegLabel(Detector):
    """Positive-label softmax mass against WordNet negative labels far from the ID classes (CLIP)."""

    name = "neglabel"
    requires = frozenset({"features", "text_embeddings"})
    paper = "Jiang et al., ICLR 2024, arXiv 2403.20078"
    score_only_hyperparams = frozenset({"temperature", "chunk_size"})

    neg_fraction: Annotated[float, Interval(
        0, 1, "right", note="the share of the candidates kept")] = 0.15
    percentile: Annotated[float, Interval(
        0, 1, note="a quantile of the affinities, a fraction")] = 0.95
    n_groups: Annotated[int, Integer(min=1)] = 100
    temperature: Positive = 0.01
    positive_prompt: Prompt = "the nice {}"
    noun_prompt: Prompt = "the nice {}"
    adj_prompt: Prompt = "This is a {} photo"
    vocabulary: Annotated[str | None, Text(
        "a vocabulary file (None: the packaged WordNet list)")] = None
    negatives: Annotated[str | None, Validated(
        "a .npy or .txt file of negative prompts (None: mine them)", read_negative_prompts)] = None
    seed: Seed = 0
    chunk_size: Annotated[int, Integer(min=1)] = 4096

    def _fit(self, train: Activations | None, model: object) -> None:
        names = getattr(model, "class_names", None)
        if not names:
            raise InvalidInputError("neglabel needs the CLIP classifier's class names (model.class_names)")
        encode = model.encode_text  # type: ignore[attr-defined]
        positives = encode([self.positive_prompt.format(c) for c in names]).cpu()
        if self.negatives is not None:
            negatives, kept_words = self._fixed_negatives(encode)
        else:
            negatives, kept_words = self._mined_negatives(encode, positives)
        if len(negatives) < self.n_groups:
            where = ("the negatives file holds" if self.negatives is not None else "neglabel mined")
            raise InvalidInputError(
                f"neglabel: {where} {len(negatives)} negative labels, fewer than "
                f"n_groups={self.n_groups}: use a larger list (vocabulary / neg_fraction), or "
                "fewer groups"
            )
        self.positives_ = positives.double()
        self.negatives_ = negatives.double()
        self.negative_words_ = kept_words
        usable = len(negatives) - len(negatives) % self.n_groups
        gen = torch.Generator().manual_seed(self.seed)
        self.group_order_ = torch.randperm(usable, generator=gen) if self.n_groups > 1 else None

    def _fixed_negatives(self, encode: Any) -> tuple[torch.Tensor, list[str]]:
        """The prompts of ``negatives``, encoded as they stand (no mining)."""
        if self.vocabulary is not None:
            raise InvalidInputError(
                "neglabel: give vocabulary (mine negatives from it) or negatives (a fixed list), "
                "not both: a fixed list is used as it is, so the vocabulary would be unused")
        prompts = read_negative_prompts(str(self.negatives))
        self.negatives_sha256_ = hashlib.sha256(Path(str(self.negatives)).read_bytes()).hexdigest()
        return encode(prompts).cpu(), prompts

    def _mined_negatives(self, encode: Any, positives: torch.Tensor
                         ) -> tuple[torch.Tensor, list[str]]:
        """The WordNet words farthest from the ID labels (see the module docstring)."""
        words = load_vocabulary(self.vocabulary)
        kept_words: list[str] = []
        kept: list[torch.Tensor] = []
        for pos, prompt in (("noun", self.noun_prompt), ("adj", self.adj_prompt)):
            emb = encode([prompt.format(w) for w in words[pos]]).cpu()
            idx = mine_negative_labels(positives, emb, fraction=self.neg_fraction, percentile=self.percentile)
            kept.append(emb[idx])
            kept_words += [words[pos][i] for i in idx]
        return torch.cat(kept), kept_words

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
