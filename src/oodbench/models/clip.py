"""CLIP zero-shot classifiers through open_clip (``pip install oodbench[clip]``).

Spec: ``clip:<architecture>/<pretrained tag>``, e.g. ``clip:ViT-B-32-quickgelu/openai`` or
``clip:ViT-B-16/laion2b_s34b_b88k`` (any pair of ``open_clip.list_pretrained()`` whose
architecture has the activation its weights were trained with: OpenAI's weights, and the other
tags open_clip marks ``quick_gelu``, need the ``-quickgelu`` architecture; ``clip:ViT-B-16/openai``
is refused, as open_clip would build GELU towers for them, see :func:`activation_mismatch`).
``pretrained=False`` (or the tag ``none``) builds a randomly initialised model; ``weights=PATH``
loads a local checkpoint safely (safetensors or ``weights_only=True``): a full state dict
(open_clip's, OpenAI's, oodbench's training output, CMA's release) or NPOS's partial release on
top of the tag's pretrained weights (:mod:`oodbench.models.clip_checkpoints`); a checkpoint of
another architecture is an error naming the architectures that fit it.

The zero-shot classifier of Radford et al. ("Learning Transferable Visual Models From Natural
Language Supervision", ICML 2021, arXiv 2103.00020) as a :class:`Classifier`:

    feature_map(x) = encode_image(x)                    (B, D), the unnormalised image embedding
    features       = feature_map / ||feature_map||      (B, D), the normalised image embedding
    t_c            = normalise(mean_k normalise(encode_text(template_k(class_c))))
    logits         = features @ (s * T).T,  s = exp(logit_scale) (100 for OpenAI's CLIP)

so ``head_weight = s * T`` (rows: class text embeddings times the logit scale), ``head_bias = 0``,
and ``softmax(logits)`` is CLIP's zero-shot class distribution. Cosine similarities, which MCM and
NegLabel use, are ``features @ normalise(head_weight).T``. Class names and prompt templates default
to the ImageNet ones open_clip ships (1000 names, OpenAI's 80 templates); pass your own with
``class_names=`` / ``templates=``.

Text embeddings are cached under ``$OODBENCH_CACHE/text_embeddings/``, keyed by the model's
weights digest and the exact prompts.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from oodbench.atomic_files import save_npy
from oodbench.config import cache_dir
from oodbench.errors import InvalidInputError, MissingDependencyError, OodbenchError
from oodbench.models.checkpoint import read_state_dict
from oodbench.models.classifier import Classifier
from oodbench.models.clip_checkpoints import is_npos_release, load_into

Template = Callable[[str], str]


def _open_clip() -> Any:
    try:
        import open_clip
    except ImportError as err:  # pragma: no cover - exercised only without the extra
        raise MissingDependencyError(
            "CLIP models need open_clip: pip install 'oodbench[clip]' (open-clip-torch)"
        ) from err
    return open_clip


def parse_clip_spec(spec: str) -> tuple[str, str | None]:
    """``"ViT-B-32-quickgelu/openai"`` -> ``("ViT-B-32-quickgelu", "openai")``; the tag is
    optional."""
    arch, _, tag = spec.partition("/")
    if not arch:
        raise InvalidInputError(
            f"CLIP spec {spec!r}: expected clip:<architecture>/<pretrained tag>, "
            "e.g. clip:ViT-B-32-quickgelu/openai"
        )
    return arch, (tag or None)


def activation_mismatch(arch: str, tag: str | None) -> str | None:
    """Why ``arch`` cannot hold the weights of ``tag``, or ``None`` when it can.

    Weights trained with QuickGELU (OpenAI's, and every tag open_clip's pretrained list marks
    ``quick_gelu``) need towers built with it: open_clip's ``<arch>-quickgelu`` architectures.
    open_clip builds ``ViT-B-16`` with GELU even for the tag ``openai`` (a ``UserWarning``
    only), and a state dict cannot tell the two activations apart, so every activation of such
    a model would differ from the released one under a spec that names those weights.
    """
    if tag in (None, "none"):
        return None
    open_clip = _open_clip()
    needs = bool((open_clip.get_pretrained_cfg(arch, tag) or {}).get("quick_gelu", False))
    has = bool((open_clip.get_model_config(arch) or {}).get("quick_gelu", False))
    if not needs or has:
        return None
    twin = f"{arch}-quickgelu"
    fix = (f"use clip:{twin}/{tag}" if (twin, tag) in open_clip.list_pretrained()
           else "use an architecture built with QuickGELU")
    return (f"clip:{arch}/{tag}: the {tag!r} weights were trained with QuickGELU, but open_clip's "
            f"{arch} builds GELU towers (every activation would differ from the released "
            f"model's); {fix}")


#: the 18 prompt templates of NPOS' zero-shot head (deeplearning-wisc/npos
#: CLIP_based/OOD/CLIP/CLIP_ft.py:196-215): "a photo of a {}." and eight variants, each with
#: "a" and with "the"
NPOS_TEMPLATES: tuple[str, ...] = tuple(
    phrase.format(article=article) + " {}."
    for article in ("a", "the")
    for phrase in ("a photo of {article}", "a blurry photo of {article}",
                   "a black and white photo of {article}", "a low contrast photo of {article}",
                   "a high contrast photo of {article}", "a bad photo of {article}",
                   "a good photo of {article}", "a photo of {article} small",
                   "a photo of {article} big"))


def resolve_templates(templates: str | Sequence[str | Template] | None) -> list[Template]:
    """Prompt templates: ``"openai"`` (80, default), ``"simple"`` (7), ``"npos"`` (NPOS' 18,
    :data:`NPOS_TEMPLATES`), or your own.

    Your own may be callables or format strings with one ``{}`` (``"a photo of a {}."``).
    """
    open_clip = _open_clip()
    if templates is None or templates == "openai":
        return list(open_clip.OPENAI_IMAGENET_TEMPLATES)
    if templates == "simple":
        return list(open_clip.SIMPLE_IMAGENET_TEMPLATES)
    if templates == "npos":
        return [t.format for t in NPOS_TEMPLATES]
    if isinstance(templates, str):
        raise InvalidInputError(
            f"templates={templates!r}: use 'openai', 'simple', 'npos' or a list of format "
            "strings with '{}'"
        )
    out: list[Template] = []
    for t in templates:
        if callable(t):
            out.append(t)
        elif isinstance(t, str) and "{}" in t:
            out.append(t.format)
        else:
            raise InvalidInputError(f"prompt template {t!r} needs exactly one '{{}}' for the class name")
    if not out:
        raise InvalidInputError("templates is empty: pass at least one prompt template")
    return out


class ClipClassifier(Classifier):
    """An open_clip model used as a zero-shot classifier (see the module docstring)."""

    _head_weight: torch.Tensor
    class_names: list[str]

    def __init__(
        self,
        clip_model: torch.nn.Module,
        tokenizer: Callable[[list[str]], torch.Tensor],
        transform: Callable[..., torch.Tensor],
        *,
        spec: str,
        class_names: Sequence[str],
        templates: str | Sequence[str | Template] | None = None,
        text_batch_size: int = 256,
    ):
        super().__init__()
        if not class_names:
            raise InvalidInputError("a CLIP zero-shot classifier needs at least one class name")
        self.clip = clip_model.eval()
        self.tokenizer = tokenizer
        self.transform = transform
        self.spec = spec
        self.class_names = list(class_names)
        self.num_classes = len(self.class_names)
        self.templates = resolve_templates(templates)
        self.text_batch_size = text_batch_size
        self._digest: str | None = None
        text = self.zero_shot_text_embeddings()
        scale = float(self.clip.logit_scale.detach().exp())  # type: ignore[operator]
        self.logit_scale = scale
        self.register_buffer("_head_weight", text * scale, persistent=False)

    # -- text side ------------------------------------------------------------------------------
    @property
    def device(self) -> torch.device:
        return next(self.clip.parameters()).device

    def _tower_digest(self) -> str:
        if self._digest is None:
            h = hashlib.sha256(self.spec.encode())
            for name, tensor in self.clip.state_dict().items():
                h.update(name.encode())
                h.update(tensor.detach().cpu().contiguous().numpy().tobytes())
            self._digest = h.hexdigest()
        return self._digest

    @torch.inference_mode()
    def encode_text(self, prompts: Sequence[str], *, cache: bool = True) -> torch.Tensor:
        """L2-normalised text embeddings (len(prompts), D), float32 on the model's device.

        Cached on disk by (weights digest, prompts), so a vocabulary of 80k NegLabel prompts is
        embedded once per model.
        """
        prompts = list(prompts)
        key = hashlib.sha256(("\n".join([self._tower_digest(), *prompts])).encode()).hexdigest()
        path = cache_dir() / "text_embeddings" / f"{key}.npy"
        if cache and path.exists():
            return torch.from_numpy(np.load(path)).to(self.device)
        chunks = []
        for start in range(0, len(prompts), self.text_batch_size):
            tokens = self.tokenizer(prompts[start : start + self.text_batch_size]).to(self.device)
            chunks.append(F.normalize(self.clip.encode_text(tokens).float(), dim=-1))  # type: ignore[operator]
        emb = torch.cat(chunks) if chunks else torch.empty(0, 0)
        if cache:
            _atomic_save(path, emb.cpu().numpy())
        return emb

    def zero_shot_text_embeddings(self) -> torch.Tensor:
        """One normalised embedding per class: the renormalised mean over the templates."""
        prompts = [t(c) for c in self.class_names for t in self.templates]
        emb = self.encode_text(prompts).reshape(self.num_classes, len(self.templates), -1)
        return F.normalize(emb.mean(dim=1), dim=-1)

    def refresh_text_head(self) -> None:
        """Recompute the zero-shot head (and the logit scale) from the current towers, e.g.
        after fine-tuning the text tower (CMA)."""
        self._digest = None
        scale = float(self.clip.logit_scale.detach().exp())  # type: ignore[operator]
        self.logit_scale = scale
        self._head_weight = self.zero_shot_text_embeddings() * scale

    # -- Classifier contract --------------------------------------------------------------------
    def forward_feature_map(self, x: torch.Tensor) -> torch.Tensor:
        return self.clip.encode_image(x).float()  # type: ignore[operator]

    def pool(self, feature_map: torch.Tensor) -> torch.Tensor:
        return F.normalize(feature_map, dim=-1)

    def head(self, features: torch.Tensor) -> torch.Tensor:
        return features @ self._head_weight.T

    @property
    def head_weight(self) -> torch.Tensor:
        return self._head_weight

    @property
    def head_bias(self) -> torch.Tensor:
        return torch.zeros(self.num_classes, device=self._head_weight.device)

    def weights_digest(self) -> str:
        """Digest of both towers and of the zero-shot head (class names and templates)."""
        h = hashlib.sha256(self._tower_digest().encode())
        h.update(self._head_weight.cpu().numpy().tobytes())
        return h.hexdigest()


def _atomic_save(path: os.PathLike[str] | str, array: np.ndarray) -> None:
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    save_npy(target, array)


def load_clip(
    spec: str,
    *,
    pretrained: bool = True,
    weights: str | os.PathLike[str] | None = None,
    device: str | torch.device | None = None,
    class_names: Sequence[str] | None = None,
    templates: str | Sequence[str | Template] | None = None,
) -> ClipClassifier:
    """Build a :class:`ClipClassifier` from ``"<architecture>/<pretrained tag>"`` (no ``clip:``)."""
    open_clip = _open_clip()
    arch, tag = parse_clip_spec(spec)
    if arch not in open_clip.list_models():
        from oodbench.errors import UnknownNameError

        raise UnknownNameError("open_clip architecture", arch, open_clip.list_models())
    if pretrained or weights is not None:  # the tag's weights load, or the checkpoint's base
        mismatch = activation_mismatch(arch, tag)
        if mismatch:
            raise InvalidInputError(mismatch)
    state, origin = None, ""
    if weights is not None:
        state, origin = read_state_dict(weights), repr(os.fspath(weights))
    if state is not None and not is_npos_release(state):
        source: str | None = None  # every weight comes from the checkpoint
    elif not pretrained or tag in (None, "none"):
        if state is not None:
            raise InvalidInputError(
                f"checkpoint {origin} is NPOS's release (the last vision blocks, "
                "ln_post and proj only): the rest comes from the pretrained CLIP it was "
                "fine-tuned from; name its tag (NPOS's: clip:ViT-B-16-quickgelu/openai)")
        if pretrained and tag is None:
            raise InvalidInputError(
                f"clip:{spec} names no pretrained tag: use clip:{arch}/<tag> (tags for {arch}: "
                f"{', '.join(t for a, t in open_clip.list_pretrained() if a == arch) or 'none'}) "
                "or pretrained=False for random weights"
            )
        source = None
    else:
        source = tag
    try:
        model, _, preprocess = open_clip.create_model_and_transforms(arch, pretrained=source)
    except (RuntimeError, OSError, ValueError) as err:
        raise OodbenchError(
            f"could not load CLIP weights {arch}/{source}: {err}. Offline, the weights must already "
            "be in the Hugging Face / open_clip cache, or pass weights=PATH to a local checkpoint"
        ) from err
    if state is not None:
        load_into(model, state, origin=origin, arch=arch)
    imagenet = class_names is None
    names = list(open_clip.IMAGENET_CLASSNAMES) if class_names is None else list(class_names)
    model = model.to(device or "cpu")
    classifier = ClipClassifier(
        model,
        open_clip.get_tokenizer(arch),
        preprocess,
        spec=f"clip:{spec}",
        class_names=names,
        templates=templates,
    )
    if imagenet:  # open_clip's ImageNet class names are in the sorted-wnid order
        from oodbench.data.imagenet import imagenet1k_wnids

        classifier.class_wnids = imagenet1k_wnids()
    return classifier
