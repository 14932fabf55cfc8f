"""A model entry of a configuration file (``[[models]]`` of an experiment, ``[model]`` of a
training config), as data; ``oodbench.run.build.load_model`` makes the
:class:`~oodbench.models.classifier.Classifier`."""

from __future__ import annotations

from typing import Any

from pydantic import (
    Field,
    StrictBool,
    StrictInt,
    StrictStr,
    ValidationInfo,
    field_validator,
    model_validator,
)

from oodbench.schema import ConfigPath, Schema


class ModelSpec(Schema):
    """A classifier: an ``oodbench.models.load`` spec, or a ``"module:callable"`` factory.

    TOML: ``{ spec = "timm:resnet50", pretrained = true, weights = "ckpt.safetensors" }``
    (``num_classes`` for a head of another size), ``{ factory = "mypkg.nets:build", options =
    { width = 2 }, weights = "net.pt" }``, or ``{ train = "train.toml" }``: the model a training
    config produces (:mod:`oodbench.train.config`; trained once, cached by content). ``name``
    (the label in tables) defaults to the spec, factory or training config.
    """

    shorthand = "spec"

    name: StrictStr = ""
    spec: StrictStr | None = None
    factory: StrictStr | None = None
    train: ConfigPath | None = None
    pretrained: StrictBool = True
    weights: ConfigPath | None = None
    num_classes: StrictInt | None = None
    options: dict[str, Any] = Field(default_factory=dict)

    @classmethod
    def prepare(cls, data: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
        label = data.get("spec") or data.get("factory") or data.get("train")
        if not data.get("name") and isinstance(label, str):
            data["name"] = label
        return data

    @model_validator(mode="after")
    def _spec_or_factory(self) -> ModelSpec:
        if [self.spec, self.factory, self.train].count(None) != 2:
            raise ValueError(
                "give exactly one of spec = \"timm:resnet50\" (see `oodbench list models`), "
                "factory = \"package.module:callable\" or train = \"train.toml\""
            )
        if self.spec is None and self.num_classes is not None:
            raise ValueError("num_classes goes with spec; a factory takes it in options")
        if self.spec is not None and self.options:
            raise ValueError("options go with factory; a spec takes none")
        if self.train is not None and (self.weights is not None or self.options):
            raise ValueError("a train = \"...\" model takes its weights and options from the "
                             "training config; remove weights / options here")
        return self

    @field_validator("factory")
    @classmethod
    def _importable_form(cls, factory: str | None) -> str | None:
        if factory is not None and ":" not in factory:
            raise ValueError(f"expected 'package.module:callable', got {factory!r}")
        return factory

    def describe(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "pretrained": self.pretrained}
        if self.spec is not None:
            out["spec"] = self.spec
        if self.factory is not None:
            out["factory"] = self.factory
            out["options"] = dict(self.options)
        if self.num_classes is not None:
            out["num_classes"] = self.num_classes
        if self.train is not None:  # oodbench.run.build.describe_model adds its content key
            out["train"] = str(self.train)
        if self.weights is not None:
            out["weights"] = str(self.weights)
        return out
