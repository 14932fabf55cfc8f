"""``retrain="scratch"`` variants: a fresh network per split, trained on the kept classes only.

The tuning paper's Algorithm 1, line 5 (Mondal et al., arXiv 2602.05935, Sec. 2): "Train
classification network f_theta_i^M on D_id,sim,i^M" -- the variant is trained for the task on
the simulated-ID classes, so the withheld classes are OOD to it ("this data is excluded from
training the network"). Here each variant is

* **re-initialised through the model factory** (never started from the given weights), and
* **trained with the original network's recipe on the images of the kept classes' fit rows
  only** (labels re-indexed to the kept classes; a withheld class's image never reaches the
  trainer: :func:`kept_training_data` asserts it on the data handed over).

Two recipes (``train`` options of the held-out protocols):

* ``train={"recipe": NAME, ...}``: the small-image recipe :mod:`oodbench.train.recipe`
  (``RECIPES[NAME]`` of :mod:`oodbench.train.recipe_config`, e.g. ``"cpu-resnet9"``, the CPU
  study's; its optimiser fields ``epochs``, ``lr``, ... may be overridden beside it, as may
  ``loss``, ``loss_options`` and ``device``). The factory is the recipe's own (:meth:`Recipe.build`, seeded); the images are
  the fit rows' pixels at the recipe's size.
* otherwise: ``oodbench.train.train`` with the user's optimiser settings (fields of
  :class:`~oodbench.train.optim.OptimSettings` on the preset
  :data:`~oodbench.train.optim.RECIPE`, and ``loss``, ``loss_options``, ``device``, ``amp``,
  ``num_workers``), on a network built by ``oodbench.models.load(model.spec,
  pretrained=False, num_classes=len(kept))`` under ``torch.manual_seed(seed)``.

The variant keeps the given model's PIL transform, so its activations come from
``oodbench.extract`` (cached by its weights digest) as for ``retrain="full"``.

Cache and resume: each variant trains into
``cache_dir()/tune/held_out/scratch/<key>/``, ``key`` a digest of the recipe (or the model spec
and optimiser settings), the training images and labels (their fingerprint), the loss and the
seed, so a variant is cached per (split, seed). Every finished epoch writes a checkpoint there,
so a killed run resumes from its last epoch; a finished variant is loaded without training.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from oodbench.data.arrays import ArraySource
from oodbench.data.source import RelabeledSource, Source, SubsetSource
from oodbench.errors import InvalidInputError, UnknownNameError
from oodbench.extract.activations import Activations
from oodbench.tuning.kept_classes import images_of, reindex, variant_dir

#: the options of the scratch trainer (``recipe`` selects the small-image recipe)
RECIPE_OPTIONS = frozenset({"recipe", "loss", "loss_options", "device"})
TRAIN_OPTIONS = frozenset({"loss", "loss_options", "device", "amp", "num_workers"})


@dataclass(frozen=True)
class KeptData:
    """The training data of one scratch variant: source rows of ``fit``, their pixels' source,
    labels re-indexed to ``kept`` and the fit rows' ids (what the variant trained on)."""

    rows: np.ndarray
    source: Source
    labels: np.ndarray
    ids: np.ndarray


def kept_training_data(fit: Activations, kept: np.ndarray) -> KeptData:
    """The fit rows of the ``kept`` classes and nothing else (asserted on the labels handed on:
    every one of them is a kept class)."""
    labels = np.asarray(fit.labels)
    rows = np.flatnonzero(np.isin(labels, kept))
    new = reindex(labels[rows], kept)
    if rows.size == 0 or (new < 0).any() or not np.isin(labels[rows], kept).all():
        raise InvalidInputError(
            f"held-out scratch variant: fit has no training image of the kept classes {kept.tolist()}")
    return KeptData(rows, images_of(fit.subset(rows)), new, np.asarray(fit.ids)[rows])


def pixel_array(source: Source) -> np.ndarray:
    """The (N, H, W, 3) uint8 pixels of ``source`` (a subset of an ``ArraySource`` is sliced;
    any other source is decoded image by image)."""
    chain: list[np.ndarray] = []
    node: Any = source
    while isinstance(node, SubsetSource):
        chain.append(node.indices)
        node = node.parent
    if isinstance(node, ArraySource):
        index = np.arange(len(node))
        for indices in reversed(chain):
            index = index[indices]
        return np.asarray(node.images[index])
    pixels = [np.asarray(source.load(i).convert("RGB")) for i in range(len(source))]
    if len({p.shape for p in pixels}) > 1:
        raise InvalidInputError(
            f"held-out scratch variant with a recipe: the images of {source.name!r} have several "
            "sizes; the small-image recipe needs one size (resize them first)")
    return np.stack(pixels)


def resolve_recipe(options: Mapping[str, Any]) -> Any:
    """The recipe named by ``options["recipe"]`` (or given as a ``Recipe``), with the
    optimiser fields among ``options`` applied (``UnknownNameError`` for an unknown name)."""
    from oodbench.train.optim import FIELDS
    from oodbench.train.recipe_config import RECIPES, Recipe  # no torch: validation reads it

    name = options["recipe"]
    if isinstance(name, Recipe):
        recipe = name
    elif isinstance(name, str) and name in RECIPES:
        recipe = RECIPES[name]
    else:
        raise InvalidInputError(
            f"held-out scratch variants: {UnknownNameError('recipe', str(name), RECIPES)}")
    changes = {k: v for k, v in options.items() if k in FIELDS}
    return recipe.scaled(**changes) if changes else recipe


def check_static(options: Mapping[str, Any]) -> None:
    """The checks that need no model: the option names of the chosen path, the recipe's name."""
    from oodbench.train.optim import FIELDS

    allowed = (RECIPE_OPTIONS if "recipe" in options else TRAIN_OPTIONS) | set(FIELDS)
    unknown = sorted(set(options) - allowed)
    if unknown:
        raise InvalidInputError(
            f"held-out scratch variants: {UnknownNameError('train option', unknown[0], allowed)}")
    if "recipe" in options:
        resolve_recipe(options)


def check_options(options: Mapping[str, Any], model: Any) -> None:
    """Every check that can fail before a scratch variant trains (one-line errors)."""
    check_static(options)
    if "recipe" in options:
        return
    from oodbench.models.registry import parse_spec

    spec = getattr(model, "spec", None)
    try:
        parse_spec(str(spec))
    except Exception as err:  # noqa: BLE001 - any unparsable spec gets the same advice
        raise InvalidInputError(
            f"held-out scratch variants re-initialise the network through oodbench.models.load"
            f"(spec), but the model's spec {spec!r} is not loadable ({err}); give "
            "train={'recipe': NAME} for a small-image recipe network") from None


def _root(cache: bool, stack: contextlib.ExitStack) -> Path:
    if cache:
        return variant_dir() / "scratch"
    return Path(stack.enter_context(tempfile.TemporaryDirectory()))


def _key(parts: Mapping[str, Any]) -> str:
    return hashlib.sha256(json.dumps({"format": 1, "torch": torch.__version__, **parts},
                                     sort_keys=True, default=str).encode()).hexdigest()[:24]


def train_scratch(model: Any, fit: Activations, kept: np.ndarray, options: Mapping[str, Any],
                  seed: int, cache: bool = True) -> tuple[Any, bool, KeptData]:
    """(the variant trained from scratch on the kept classes, whether it came from the cache,
    the data it trained on). See the module docstring."""
    data = kept_training_data(fit, kept)
    names = [str(model.class_names[int(c)]) if getattr(model, "class_names", None) else str(int(c))
             for c in kept]
    with contextlib.ExitStack() as stack:
        root = _root(cache, stack)
        if "recipe" in options:
            net, done = _train_recipe(data, names, options, seed, root, cache)
        else:
            net, done = _train_general(model, data, names, options, seed, root, cache)
    net.transform = model.transform
    net.class_names = names
    return net.eval(), done, data


def _train_recipe(data: KeptData, names: list[str], options: Mapping[str, Any], seed: int,
                  root: Path, cache: bool) -> tuple[Any, bool]:
    from oodbench.train import checkpoint as ckpt
    from oodbench.train.recipe import run_key, train_recipe
    from oodbench.train.tensor_images import TensorImages

    recipe = resolve_recipe(options)
    images = torch.from_numpy(pixel_array(data.source)).permute(0, 3, 1, 2).contiguous()
    tensors = TensorImages(images, torch.from_numpy(data.labels), tuple(names),
                           f"{data.source.name}[kept]")
    loss, loss_options = options.get("loss", "ce"), dict(options.get("loss_options") or {})
    out = root / f"recipe-{run_key(recipe, tensors, loss, loss_options, seed)}"
    previous = ckpt.read_checkpoint(out) if out.exists() else None
    done = cache and previous is not None and previous[0].get("epochs_done") == recipe.epochs
    result = train_recipe(recipe, tensors, loss=loss, loss_options=loss_options, seed=seed,
                          device=options.get("device", "auto"), out=out)
    return result.model.cpu(), done


def _train_general(model: Any, data: KeptData, names: list[str], options: Mapping[str, Any],
                   seed: int, root: Path, cache: bool) -> tuple[Any, bool]:
    from oodbench import models
    from oodbench.train import train
    from oodbench.train.checkpoint import STATE
    from oodbench.train.optim import RECIPE, from_options

    source = RelabeledSource(data.source, data.labels)
    optim, rest = from_options({"progress": False, **options, "seed": seed}, RECIPE)
    out = root / f"train-{_key({'spec': model.spec, 'images': source.fingerprint(), 'options': dict(options), 'seed': seed})}"
    state = json.loads((out / STATE).read_text()) if (out / STATE).exists() else {}
    done = cache and state.get("epochs_done") == optim.epochs
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        fresh = models.load(model.spec, pretrained=False, num_classes=len(names))
    fresh.transform = model.transform
    result = train(fresh, source, out=out, optim=optim, **rest)
    return result.model, done
