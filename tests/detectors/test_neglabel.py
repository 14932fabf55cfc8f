"""NegLabel: mining on a tiny vocabulary and the grouped score, against independent numpy."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from oodbench.data.vocabulary import BUNDLED, load_vocabulary
from oodbench.detectors import NotFittedError, create
from oodbench.detectors.neglabel import mine_negative_labels
from oodbench.errors import InvalidInputError
from oodbench.extract.activations import Activations
from tests._clip_fixtures import tiny_clip


def _normalise(a: np.ndarray) -> np.ndarray:
    return a / np.linalg.norm(a, axis=1, keepdims=True)


def test_mining_keeps_the_lowest_quantile_affinity():
    rng = np.random.default_rng(0)
    pos = _normalise(rng.normal(size=(20, 8)))
    cand = _normalise(rng.normal(size=(50, 8)))
    idx = mine_negative_labels(torch.from_numpy(pos), torch.from_numpy(cand), fraction=0.2, percentile=0.95)
    affinity = np.quantile(cand @ pos.T, 0.95, axis=1)  # numpy's default = linear, as torch
    expected = np.argsort(affinity, kind="stable")[:10]
    # an order of float64 affinities: adjacent ones are >= 3.5e-4 apart, rounding ~1e-16
    np.testing.assert_array_equal(idx, expected)


def test_bundled_vocabulary_is_wordnet_nouns_and_adjectives():
    words = load_vocabulary()
    assert BUNDLED.exists()
    assert len(words["noun"]) == 67893 and len(words["adj"]) == 14045
    assert "entity" in words["noun"] and "able" in words["adj"]
    assert len(set(words["noun"])) == len(words["noun"])


def test_vocabulary_errors(tmp_path):
    bad = tmp_path / "v.tsv"
    bad.write_text("noun\tcat\nverb\trun\n")
    with pytest.raises(InvalidInputError, match="v.tsv:2"):
        load_vocabulary(bad)


def _write_vocab(tmp_path, nouns, adjs):
    path = tmp_path / "vocab.tsv"
    path.write_text("".join(f"noun\t{w}\n" for w in nouns) + "".join(f"adj\t{w}\n" for w in adjs))
    return str(path)


def _reference_score(f, pos, neg, order, n_groups, tau):
    """The published grouped score, written independently with an explicit softmax per group."""
    f = _normalise(f)
    usable = len(neg) - len(neg) % n_groups
    neg = neg[:usable][order]
    groups = neg.reshape(n_groups, -1, neg.shape[1])
    out = np.zeros(len(f))
    for g in groups:
        sims = np.concatenate([f @ pos.T, f @ g.T], axis=1) / tau
        sims -= sims.max(axis=1, keepdims=True)
        p = np.exp(sims) / np.exp(sims).sum(axis=1, keepdims=True)
        out += p[:, : len(pos)].sum(axis=1)
    return out / n_groups


def test_neglabel_end_to_end_on_tiny_clip(tmp_path):
    classes = ["cat", "dog", "car", "tree"]
    model = tiny_clip(classes)
    nouns = [f"noun{i}" for i in range(40)] + ["cat", "kitten", "puppy", "automobile"]
    adjs = [f"adj{i}" for i in range(21)]
    det = create("neglabel", vocabulary=_write_vocab(tmp_path, nouns, adjs), n_groups=4, neg_fraction=0.5)
    rng = np.random.default_rng(3)
    feats = rng.normal(size=(16, 32)).astype(np.float32)
    acts = Activations(logits=np.zeros((16, 4), np.float32), labels=np.zeros(16, np.int64),
                       ids=np.arange(16).astype(str), features=feats)
    with pytest.raises(NotFittedError):
        det.score(acts)
    det.fit(None, model)

    # mining, recomputed with numpy from the model's own text embeddings
    with torch.no_grad():
        pos = F.normalize(model.clip.encode_text(model.tokenizer([f"the nice {c}" for c in classes])).float(), dim=-1).numpy()
        n_emb = F.normalize(model.clip.encode_text(model.tokenizer([f"the nice {w}" for w in nouns])).float(), dim=-1).numpy()
        a_emb = F.normalize(model.clip.encode_text(model.tokenizer([f"This is a {w} photo" for w in adjs])).float(), dim=-1).numpy()
    keep_n = np.argsort(np.quantile(n_emb @ pos.T, 0.95, axis=1), kind="stable")[: int(len(nouns) * 0.5)]
    keep_a = np.argsort(np.quantile(a_emb @ pos.T, 0.95, axis=1), kind="stable")[: int(len(adjs) * 0.5)]
    # an order of float32 affinities of the same model's embeddings: adjacent ones are >= 5e-5
    # apart, float32 rounding (another batching of the text encoder) ~1e-7
    assert det.negative_words_ == [nouns[i] for i in keep_n] + [adjs[i] for i in keep_a]
    neg = np.concatenate([n_emb[keep_n], a_emb[keep_a]])
    # float32 unit embeddings of the same model (another batching): ~1e-7 apart
    np.testing.assert_allclose(det.negatives_.numpy(), neg, rtol=1e-5, atol=1e-6)

    scores = det.score(acts)
    expected = _reference_score(feats.astype(np.float64), det.positives_.numpy(), det.negatives_.numpy(),
                                det.group_order_.numpy(), 4, 0.01)
    # float64 both: cosines within ~1e-15, divided by tau = 0.01 the exponents within 1e-13,
    # the softmax masses (in (0, 1), not near 0 here) within ~1e-12 relative
    np.testing.assert_allclose(scores, expected, rtol=1e-9)
    assert np.all((scores > 0) & (scores < 1))
    # seeded: a second fit gives the same groups and scores
    det2 = create("neglabel", vocabulary=det.vocabulary, n_groups=4, neg_fraction=0.5).fit(None, model)
    np.testing.assert_array_equal(det2.score(acts), scores)  # the same code in this process


def test_neglabel_ungrouped_is_plain_softmax_mass(tmp_path):
    model = tiny_clip(["cat", "dog"])
    det = create("neglabel", vocabulary=_write_vocab(tmp_path, ["a", "b", "c", "d"], ["e", "f"]),
                 n_groups=1, neg_fraction=1.0).fit(None, model)
    feats = np.random.default_rng(0).normal(size=(5, 32))
    acts = Activations(logits=np.zeros((5, 2)), labels=np.zeros(5, np.int64), ids=np.arange(5).astype(str),
                       features=feats)
    f = _normalise(feats)
    pos, neg = det.positives_.numpy(), det.negatives_.numpy()
    ep, en = np.exp(f @ pos.T / 0.01), np.exp(f @ neg.T / 0.01)
    np.testing.assert_allclose(det.score(acts), ep.sum(1) / (ep.sum(1) + en.sum(1)), rtol=1e-9)  # as above


def test_neglabel_needs_a_clip_model():
    with pytest.raises(InvalidInputError, match="text encoder"):
        create("neglabel").fit(None, model=object())
