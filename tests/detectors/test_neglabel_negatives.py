"""NegLabel with a fixed negative list (``negatives = "FILE"``, .npy or .txt), as CMA's official
inference.py scores: against a re-statement of that scoring on random tensors; bad files."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from oodbench.detectors import create
from oodbench.detectors.neglabel import CMA_SCORING, read_negative_prompts
from oodbench.errors import InvalidInputError
from oodbench.extract.activations import Activations
from tests._clip_fixtures import tiny_clip

CLASSES = ["cat", "dog", "car"]
#: a list laid out as CMA's neg_label_10000.npy: adjectives "This is a X photo", nouns "The nice X"
PROMPTS = [f"This is a adj{i} photo" for i in range(3)] + [f"The nice noun{i}" for i in range(9)]


def _official_cma_neglabel(image: torch.Tensor, id_text: torch.Tensor, neg_text: torch.Tensor
                           ) -> np.ndarray:
    """ma-kjh/CMA-OoDD inference.py re-stated: normalised image and text embeddings, logits
    ``cat([f @ id.T, f @ neg.T]) / 0.01`` (concatenate_and_scale, lines 62-63), softmax, the
    sum of the ID columns (lines 107-124)."""
    f = image / image.norm(dim=-1, keepdim=True)
    ids = id_text / id_text.norm(dim=-1, keepdim=True)
    neg = neg_text / neg_text.norm(dim=-1, keepdim=True)
    probs = F.softmax(torch.cat([f @ ids.T, f @ neg.T], dim=1) / 0.01, dim=1)
    return probs[:, : len(ids)].sum(dim=1).numpy()


def _write(tmp_path, kind: str) -> str:
    if kind == "npy":
        path = tmp_path / "neg.npy"
        np.save(path, np.array(PROMPTS))
    else:
        path = tmp_path / "neg.txt"
        path.write_text("\n".join(PROMPTS[:5]) + "\n\n" + "\n".join(PROMPTS[5:]) + "\n")
    return str(path)


@pytest.mark.parametrize("kind", ["npy", "txt"])
def test_fixed_negatives_score_as_the_official_cma_inference(tmp_path, kind):
    model = tiny_clip(CLASSES)
    det = create("neglabel", negatives=_write(tmp_path, kind), **CMA_SCORING).fit(None, model)
    assert det.negative_words_ == PROMPTS  # every entry, in order, encoded as it stands
    rng = np.random.default_rng(4)
    feats = rng.normal(size=(12, 32))
    acts = Activations(logits=np.zeros((12, 3)), labels=np.zeros(12, np.int64),
                       ids=np.arange(12).astype(str), features=feats)
    with torch.no_grad():
        id_text = model.clip.encode_text(model.tokenizer([f"The nice {c}" for c in CLASSES]))
        neg_text = model.clip.encode_text(model.tokenizer(PROMPTS))
    expected = _official_cma_neglabel(torch.from_numpy(feats), id_text.double(), neg_text.double())
    # float64 in both; the text embeddings of the tiny CLIP are float32 in either path (another
    # batching of the encoder: ~1e-7 relative), divided by T = 0.01 the exponents move by
    # ~1e-5 at most, so the ID masses (in (0, 1)) agree to ~1e-5 relative
    np.testing.assert_allclose(det.score(acts), expected, rtol=1e-4, atol=1e-7)


def test_cma_scoring_is_the_official_setting():
    """inference.py: ``scale=0.01`` (line 62), one list of all the negatives (lines 72-73, no
    groups), ID prompts ``f"The nice {c}"`` (line 41)."""
    assert CMA_SCORING == {"n_groups": 1, "temperature": 0.01, "positive_prompt": "The nice {}"}


@pytest.mark.parametrize(("name", "content", "message"), [
    ("missing.npy", None, "does not exist"),
    ("neg.csv", "a,b\n", "expected a .npy array of strings or a .txt file"),
    ("empty.txt", "\n\n", "holds no prompts"),
    ("numbers.npy", np.arange(4.0), "expected a 1-D array of strings"),
    ("matrix.npy", np.array([["a", "b"], ["c", "d"]]), "expected a 1-D array of strings"),
    ("blank.npy", np.array(["The nice cat", " "]), "entry 1 is empty"),
    ("garbage.npy", b"not an npy file", "is not a readable .npy array"),
])
def test_a_bad_negatives_file_is_a_clear_error(tmp_path, name, content, message):
    path = tmp_path / name
    if isinstance(content, np.ndarray):
        np.save(path, content)
    elif isinstance(content, bytes):
        path.write_bytes(content)
    elif content is not None:
        path.write_text(content)
    with pytest.raises(InvalidInputError, match=message) as err:
        create("neglabel", negatives=str(path))  # refused when created, before any fit
    assert "\n" not in str(err.value) and name in str(err.value)
    if content is None:
        with pytest.raises(InvalidInputError, match=message):
            read_negative_prompts(path)


def test_negatives_and_a_vocabulary_together_are_refused(tmp_path):
    det = create("neglabel", negatives=_write(tmp_path, "txt"), vocabulary="words.tsv",
                 n_groups=1)
    with pytest.raises(InvalidInputError, match="not both"):
        det.fit(None, tiny_clip(CLASSES))


def test_fewer_negatives_than_groups_is_refused(tmp_path):
    det = create("neglabel", negatives=_write(tmp_path, "npy"), n_groups=100)
    with pytest.raises(InvalidInputError, match="negatives file holds 12 negative labels"):
        det.fit(None, tiny_clip(CLASSES))
