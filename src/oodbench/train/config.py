"""Training configs (TOML), the format beside the experiment file, on the same pydantic schema.

    oodbench train train.toml        # or, in an experiment: [[models]] train = "train.toml"

``[model]`` is exactly an experiment's ``[[models]]`` entry (spec / factory, weights,
``num_classes``), the data tables are the experiment's sources (``{ folder = ... }``,
``{ list = ..., root = ... }``, ``{ digits = [...] }``, ``{ demo = ... }``)::

    [train]
    name = "resnet18-logitnorm"
    loss = "logitnorm"              # oodbench.losses.available(); options in loss_options
    loss_options = { tau = 0.04 }
    trainable = "all"               # "head", "last_block" or "all"
    epochs = 30                     # the optimiser keys: oodbench.train.optim.OptimSettings;
    batch_size = 128                # each key left out takes the loss's published recipe
    lr = 0.1                        # (oodbench.train.method_defaults: cma, npos, doe, um,
    optimizer = "sgd"               # umap), else the generic defaults (10 epochs, batch 128,
    schedule = "cosine"             # lr 0.1, ...); schedule "cosine", "constant" or "step"
    warmup_epochs = 0               # (with milestones = [60], step_factor = 10);
                                    # or warmup_fraction = 0.1 (of all steps);
                                    # nesterov = true (SGD), min_lr = 1e-6 (cosine's end)
    seed = 0
    # output = "runs/resnet18-logitnorm"   default: the training cache (see below)

    [model]
    spec = "timm:resnet18"
    pretrained = false
    num_classes = 6

    [data]
    train = { folder = "cifar6/train" }
    # outliers = { folder = "tiny-images" }   for loss = "oe"

Without ``output`` the run goes to ``cache_dir()/train/<content key>``
(``oodbench.run.build.training_key``, which also trains: ``run_training``): the key is a digest of
everything that decides the weights (model, its initial weights, the training and outlier
images' fingerprints, loss, optimiser, seed, precision), so the same config trains once and
every later ``oodbench train`` / ``oodbench run`` of it loads the finished checkpoint (an
interrupted run resumes).
"""

from __future__ import annotations

import dataclasses
import typing
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, Optional

from pydantic import (
    Field,
    StrictBool,
    StrictInt,
    StrictStr,
    create_model,
    field_validator,
    model_validator,
)

from oodbench.constraints import Options
from oodbench.data.spec import SourceSpec
from oodbench.errors import ConfigError, NoOpSettingError, OodbenchError
from oodbench.models.spec import ModelSpec
from oodbench.schema import At, ConfigPath, Schema, load
from oodbench.train.method_defaults import defaults_for
from oodbench.train.optim import FIELDS as OPTIM_FIELDS
from oodbench.train.optim import OptimSettings


class TrainConfigError(ConfigError):
    """The training config is invalid; the message names the file, the field and the fix."""


def table_type(hint: Any) -> Any:
    """The pydantic type of a table key for a dataclass field annotated ``hint``: an
    :class:`~oodbench.constraints.Options` declaration as its ``Literal``, ``int`` / ``bool`` /
    ``str`` strict (TOML writes them exactly), ``float`` as pydantic's (an integer becomes a
    float), a ``tuple[X, ...]`` as a list of X; any other type as written."""
    inner, *extras = typing.get_args(hint) if typing.get_origin(hint) is Annotated else (hint,)
    options = [e for e in extras if isinstance(e, Options)]
    if options:
        return Literal[options[0].values]
    if typing.get_origin(inner) is tuple:
        return list[table_type(typing.get_args(inner)[0])]  # type: ignore[misc]
    return {int: StrictInt, bool: StrictBool, str: StrictStr}.get(inner, inner)


def optional_keys(settings: type, name: str) -> type[Schema]:
    """A :class:`~oodbench.schema.Schema` called ``name`` whose keys are the fields of the
    dataclass ``settings``, each optional (``None``: not given; typed by :func:`table_type`): a
    table that takes a settings type's fields flat without declaring them a second time."""
    hints = typing.get_type_hints(settings, include_extras=True)
    keys: dict[str, Any] = {f.name: (Optional[table_type(hints[f.name])], None)  # noqa: UP045
                            for f in dataclasses.fields(settings) if f.init}
    return create_model(name, __base__=Schema, **keys)


if TYPE_CHECKING:
    _OptimKeys = Schema
else:
    #: the optimiser keys of ``[train]``: the fields of OptimSettings, each optional
    _OptimKeys = optional_keys(OptimSettings, "OptimKeys")


class TrainSettings(_OptimKeys):
    """The ``[train]`` table: loss, what trains, optimiser, schedule, seed, output.

    The optimiser keys are the fields of :class:`~oodbench.train.optim.OptimSettings`, flat in
    the table and declared there only (this class derives from them: a field added to
    ``OptimSettings`` is a key here, its values checked by ``OptimSettings``' declarations when
    :meth:`optim` builds it); a key left out (``None``) takes the loss's published recipe
    (:func:`oodbench.train.method_defaults.defaults_for`, the defaults of
    ``oodbench.train.train``), as do ``amp`` and ``outlier_batch_size``; :meth:`optim` turns
    them into one."""

    name: StrictStr = ""
    output: ConfigPath | None = None
    loss: StrictStr = "ce"
    loss_options: dict[str, Any] = Field(default_factory=dict)
    trainable: Literal["head", "last_block", "all"] = "all"
    seed: StrictInt = 0
    device: StrictStr = "auto"
    amp: Literal["auto", "off", "bf16", "fp16"] | None = None
    num_workers: StrictInt | Literal["auto"] = "auto"
    outlier_batch_size: StrictInt | None = None

    @field_validator("loss")
    @classmethod
    def _known_loss(cls, name: str) -> str:
        from oodbench import losses

        try:
            losses.loss_class(name)
        except OodbenchError as err:
            raise ValueError(str(err)) from None
        return name

    @model_validator(mode="after")
    def _valid(self) -> TrainSettings:
        from oodbench import losses

        try:
            self.optim()
            losses.create(self.loss, **self.loss_options)
        except OodbenchError as err:
            raise ValueError(str(err)) from None
        return self

    def optim(self) -> OptimSettings:
        """The table's optimiser settings over the loss's recipe (``InvalidInputError`` when
        they are invalid)."""
        given = {k: getattr(self, k) for k in OPTIM_FIELDS}
        if given["milestones"] is not None:
            given["milestones"] = tuple(given["milestones"])
        return defaults_for(self.loss).merge(given)

    def resolved_amp(self) -> str:
        """``amp``, else the loss's recipe's."""
        return self.amp or defaults_for(self.loss).amp

    def resolved_outlier_batch_size(self) -> int | None:
        """``outlier_batch_size``, else the loss's recipe's (``None``: twice the batch)."""
        return self.outlier_batch_size or defaults_for(self.loss).outlier_batch_size

    def record(self) -> dict[str, Any]:
        """What decides the weights, for a run's content key: every key but name, output,
        device and num_workers, as resolved against the loss's recipe; the optimiser's as
        :meth:`OptimSettings.as_dict` records it."""
        out = {k: v for k, v in self.model_dump().items()
               if k not in ("name", "output", "device", "num_workers", *OPTIM_FIELDS)}
        out["amp"] = self.resolved_amp()
        out["outlier_batch_size"] = self.resolved_outlier_batch_size()
        return {**out, **self.optim().as_dict()}


class TrainData(Schema):
    """The ``[data]`` table: the labelled training images and, for ``oe``, outlier images."""

    train: SourceSpec
    outliers: SourceSpec | None = None


class TrainConfig(Schema):
    """A whole training config file."""

    train: TrainSettings = Field(default_factory=TrainSettings)
    model: ModelSpec
    data: TrainData

    @model_validator(mode="after")
    def _sections_agree(self) -> TrainConfig:
        """The outlier source a loss needs, no setting the loss would leave a silent no-op
        (:mod:`oodbench.train.method_settings`), a model that is not itself trained."""
        from oodbench import losses
        from oodbench.train import method_settings

        s = self.train
        if losses.loss_class(s.loss).needs_outliers and self.data.outliers is None:
            raise At("[data].outliers", f"loss {s.loss!r} needs an outlier source: add "
                     "outliers = { folder = \"...\" } (images of no ID class)")
        settings = method_settings.run_settings(
            s.optim(), trainable=s.trainable, outliers=self.data.outliers,
            outlier_batch_size=s.outlier_batch_size)
        try:
            method_settings.check(losses.create(s.loss, **s.loss_options), settings)
        except NoOpSettingError as err:
            where = "[data].outliers" if err.setting == "outliers" else f"[train].{err.setting}"
            raise At(where, str(err)) from None
        if self.model.train is not None:
            raise At("[model].train", "a training config's model cannot itself be a training "
                     "config; give spec or factory (and weights to start from)")
        return self


def read_train_config(path: str | Path) -> TrainConfig:
    """Read and validate a training config (``TrainConfigError`` lists every problem)."""
    file = Path(path)
    config, _ = load(TrainConfig, file, what="training config", error=TrainConfigError,
                     context={"base_dir": file.resolve().parent})
    config.data.train.locate(f"{file}: [data].train")
    if config.data.outliers is not None:
        config.data.outliers.locate(f"{file}: [data].outliers")
    return config
