"""The one step of the pipeline that reads files before a run: what a plan's cell keys need from
the disk (spec -> plan -> **resolve** -> execute).

A cell key holds each model's identity: its entry (``ModelSpec.describe``), plus the sha256 of
its weights file (retrained weights at the same path are a new model) and, for a ``train =
"..."`` model, its training config's key (which reads that config and fingerprints its training
images). :func:`resolve` computes them once per run; :func:`oodbench.run.plan.make_plan` takes
the result and reads nothing itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from oodbench.data.download import file_digest
from oodbench.models.spec import ModelSpec

if TYPE_CHECKING:
    from oodbench.run.experiment import Experiment


@dataclass(frozen=True)
class Resolved:
    """What the disk says about an experiment's models: model name -> identity (JSON-able)."""

    models: Mapping[str, Mapping[str, Any]]


def resolve(experiment: Experiment) -> Resolved:
    """Read every weights file and training config the experiment's models name, once."""
    return Resolved({model.name: model_identity(model) for model in experiment.models})


def model_identity(spec: ModelSpec) -> dict[str, Any]:
    """The model's part of its cells' keys: ``describe_model`` and its weights' sha256."""
    from oodbench.run.build import describe_model

    ident = describe_model(spec)
    if spec.weights is not None:  # retrained weights at the same path are a new model
        ident["weights_sha256"] = file_digest(spec.weights, "sha256")
    return ident
