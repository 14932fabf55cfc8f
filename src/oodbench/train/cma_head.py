"""CMA's zero-shot head, as the official evaluation builds it.

ma-kjh/CMA-OoDD (commit e2a665d), ``inference.py``:

* :39 the class names of ``prompt.py``'s ``Prompt_classes("imagenet")`` (prompt.py:4-249: the
  1000 names open_clip ships as ``IMAGENET_CLASSNAMES``, in the same order, which oodbench's
  CLIP models use by default);
* :41 one prompt per class, ``f"The nice {c}"`` (no full stop): a single template, no ensemble
  (the ``['a photo of a {}.']`` of prompt.py:251 is returned but never used);
* :70 the prompts through the text tower; :74 each embedding L2-normalised;
* :78 logits = normalised image features @ those embeddings.T.

oodbench's head (:class:`oodbench.models.clip.ClipClassifier`) with the one template is
``normalise(mean_k normalise(e_k)) = normalise(normalise(e))``: the official embedding up to
float rounding, times ``exp(logit_scale)`` (a positive factor: no argmax moves, and MCM and
NegLabel read cosine similarities). Training uses another prompt, ``"a photo of a {}"``
(the loss option ``train_prompt``; train.py:61-63, utils/loader.py:30-31).

The loss option ``head_templates`` of ``cma`` chooses the head a fine-tuned model gets:
``"cma"`` (default: this one) or ``"model"`` (the model's own templates, e.g. OpenAI's 80).
"""

from __future__ import annotations

from oodbench.models.clip import ClipClassifier, resolve_templates

#: the one prompt template of the official head (inference.py:41)
CMA_HEAD_TEMPLATES: tuple[str, ...] = ("The nice {}",)


def refresh_head(model: ClipClassifier, head_templates: str) -> None:
    """Recompute ``model``'s zero-shot head from its (fine-tuned) towers: with CMA's template
    for ``head_templates="cma"``, with the model's own for ``"model"``."""
    if head_templates == "cma":
        model.templates = resolve_templates(list(CMA_HEAD_TEMPLATES))
    model.refresh_text_head()
