"""Scoring through the live network (ODIN, MC-dropout): the same Source and DataLoader
machinery as extraction (``oodbench.extract.iterate_batches``), one score per cached row."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from oodbench.errors import DataError, InvalidInputError
from oodbench.extract.activations import Activations
from oodbench.extract.loader import iterate_batches
from oodbench.models.classifier import Classifier


def score_live(
    who: str,
    model: Classifier,
    acts: Activations,
    batch_score: Callable[[torch.Tensor], torch.Tensor],
    *,
    batch_size: int,
    device: str,
) -> np.ndarray:
    """``batch_score(images)`` for the source image of every row of ``acts`` (float64, (N,)).

    The images are re-read from ``acts.source`` at ``acts.source_indices`` and transformed by
    the model's own ``transform``; an image that can no longer be read is an error naming it
    (its cached row has no score otherwise).
    """
    if acts.source is None or acts.source_indices is None:
        raise InvalidInputError(
            f"{who} runs the live network on the images, but these activations carry no "
            "source (e.g. they were concatenated or built from arrays); score activations "
            "returned by oodbench.extract.extract(model, source)"
        )
    positions = np.unique(np.asarray(acts.source_indices, dtype=np.int64))
    found: dict[int, float] = {}
    for images, where in iterate_batches(
        model, acts.source, batch_size=batch_size, device=device, indices=positions
    ):
        values = batch_score(images).detach().to("cpu", torch.float64).numpy()
        found.update(zip(where.tolist(), values.tolist()))
    missing = [int(p) for p in positions if int(p) not in found]
    if missing:
        ids = acts.source.ids
        raise DataError(
            f"{who}: {len(missing)} images of source {acts.source.name!r} could not be read "
            f"again (first: {[ids[p] for p in missing[:5]]}); they were readable at extraction, "
            "so restore the files or score a subset of the activations without them"
        )
    return np.array([found[int(p)] for p in acts.source_indices], dtype=np.float64)
