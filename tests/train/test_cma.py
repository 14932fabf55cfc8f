"""CMA's training path: the loss of a step equals the re-statement on the model's own
embeddings, every parameter trains, the zero-shot head follows the fine-tuned text tower, and
the CLIP detectors score the result unchanged."""

import numpy as np
import torch
import torch.nn.functional as F

from oodbench import detectors
from oodbench.extract import extract
from tests.detectors.test_neglabel import _write_vocab
from tests.losses.test_cma import official
from tests.train._clip_run import CLASSES, model, run, toy_source


def test_a_step_is_the_official_loss_on_the_models_embeddings(tmp_path):
    """One global batch of all 31 images: the step's loss is the official computation on the
    initial model's embeddings, one prompt "a photo of a {class}" per sample (same-class
    samples are each other's negatives)."""
    initial = model("cma")
    source = toy_source()
    with torch.no_grad():
        x = torch.stack([initial.transform(source.load(i)) for i in range(len(source))])
        u = F.normalize(initial.clip.encode_image(x), dim=-1)
        prompts = [f"a photo of a {CLASSES[y]}" for y in source.labels]
        v = F.normalize(initial.clip.encode_text(initial.tokenizer(prompts)), dim=-1)
        logits = (initial.clip.logit_scale.exp() * u @ v.T).double().numpy()
    result = run("cma", str(tmp_path / "one"), epochs=1, batch_size=31)
    # the run's float32 logits against these float32 ones, summed in float64: ~1e-6 relative
    np.testing.assert_allclose(result.history[0]["loss"], official(logits, 0.001), rtol=1e-5)


def test_every_parameter_trains_and_the_head_follows_the_text_tower(tmp_path):
    before = {k: v.clone() for k, v in model("cma").clip.named_parameters()}
    result = run("cma", str(tmp_path / "all"), epochs=1, weight_decay=0.0)
    after = dict(result.model.clip.named_parameters())
    unchanged = [k for k in before if torch.equal(before[k], after[k])]
    assert unchanged == []
    fresh = result.model.zero_shot_text_embeddings() * result.model.clip.logit_scale.exp()
    # float32 text embeddings of the same weights, computed twice: ~1e-7
    np.testing.assert_allclose(result.model.head_weight.detach(), fresh.detach(), rtol=1e-5,
                               atol=1e-6)
    assert not torch.allclose(result.model.head_weight, model("cma").head_weight)


def test_clip_detectors_score_the_fine_tuned_model(tmp_path):
    """MCM and NegLabel (CMA's test score; here ungrouped on a small vocabulary) run on the
    fine-tuned model as on any CLIP model."""
    result = run("cma", str(tmp_path / "det"), epochs=1)
    acts = extract(result.model, toy_source(), cache=False, progress=False, device="cpu",
                   num_workers=0)
    untrained = extract(model("cma"), toy_source(), cache=False, progress=False, device="cpu",
                        num_workers=0)
    assert not np.allclose(acts.features, untrained.features)
    scores = detectors.create("mcm").fit(None, result.model).score(acts)
    assert scores.shape == (31,) and np.isfinite(scores).all()
    vocabulary = _write_vocab(tmp_path, [f"noun{i}" for i in range(30)], ["big", "red", "old"])
    neglabel = detectors.create("neglabel", vocabulary=vocabulary, n_groups=1, neg_fraction=0.5)
    scores = neglabel.fit(None, result.model).score(acts)
    assert scores.shape == (31,) and np.all((scores > 0) & (scores < 1))
