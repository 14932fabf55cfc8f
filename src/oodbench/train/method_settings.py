"""No silent no-ops: a training run whose settings a method would ignore, or that would keep part
of the method off for the whole run, is refused before anything loads.

Every loss declares (:class:`oodbench.losses.base.Loss`):

* ``unused_settings``: the training settings it does not use (``oodbench.train.train``'s
  ``trainable`` / ``outliers`` / ``outlier_batch_size`` and the fields of
  :class:`~oodbench.train.optim.OptimSettings`), each with what it does instead. ``outliers``
  and ``outlier_batch_size`` are unused by every loss without ``needs_outliers``. A setting
  given a value other than its default (:func:`defaults`: the method's published recipe,
  :mod:`oodbench.train.method_defaults`) is refused, e.g. ``warmup_epochs``
  with ``loss="cma"`` (whose warm-up is its own ``warmup_steps``);
* ``switch_epochs``: the options naming the epoch from which part of the method switches on
  (NPOS ``start_epoch``: its outlier loss; DOE ``warmup``: its perturbed step); a value >= the
  run's ``epochs`` is refused (the run would silently be LogitNorm alone / plain Outlier
  Exposure).

:func:`check` is called by ``oodbench.train.train`` before anything is read or written, and by
the training config (``oodbench.train.config``) when the file is read, so ``oodbench train``
stops (exit status 2) before building a source. The error is a
:class:`~oodbench.errors.NoOpSettingError` naming the setting, the values and the fix.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from oodbench import losses
from oodbench.errors import NoOpSettingError
from oodbench.losses.base import Loss
from oodbench.train.method_defaults import defaults_for
from oodbench.train.optim import FIELDS as OPTIM_FIELDS
from oodbench.train.optim import OptimSettings


def defaults(loss: str) -> dict[str, Any]:
    """The default of every training setting a method may leave unused, for ``loss`` (its
    recipe's optimiser settings, :func:`oodbench.train.method_defaults.defaults_for`)."""
    optim = defaults_for(loss).optim
    return {**{name: getattr(optim, name) for name in OPTIM_FIELDS},
            "trainable": "all", "outliers": None, "outlier_batch_size": None}


#: the defaults of a loss without a published recipe
DEFAULTS: dict[str, Any] = defaults("")


def unused_settings(criterion: Loss) -> dict[str, str]:
    """The settings ``criterion`` does not use, each with what it does instead."""
    unused = dict(type(criterion).unused_settings)
    if not criterion.needs_outliers:
        users = ", ".join(row["name"] for row in losses.available() if row["needs_outliers"])
        reason = f"it trains on no outlier images (the losses that do: {users})"
        unused.setdefault("outliers", reason)
        unused.setdefault("outlier_batch_size", reason)
    return unused


def run_settings(optim: OptimSettings, *, trainable: str = "all", outliers: Any = None,
                 outlier_batch_size: int | None = None) -> dict[str, Any]:
    """The settings of a run, by name, as :func:`check` reads them (``outliers`` is any
    stand-in for the outlier source: ``None`` when there is none)."""
    return {**{name: getattr(optim, name) for name in OPTIM_FIELDS}, "trainable": trainable,
            "outliers": outliers, "outlier_batch_size": outlier_batch_size}


def _shown(name: str, value: Any) -> str:
    return "an outlier source" if name == "outliers" else f"{name}={value!r}"


def check(criterion: Loss, settings: Mapping[str, Any]) -> None:
    """Refuse ``settings`` (from :func:`run_settings`) when ``criterion`` would leave one of
    them unused, or when an option of ``switch_epochs`` is >= ``settings["epochs"]``."""
    label = f"loss {criterion.name!r}"
    default = defaults(criterion.name)
    for name, reason in unused_settings(criterion).items():
        value = settings.get(name, default[name])
        if value != default[name]:
            fix = ("give no outlier source" if name == "outliers"
                   else f"leave {name} at its default {default[name]!r}")
            raise NoOpSettingError(
                f"{label} does not use {_shown(name, value)}: {reason}; {fix}", name)
    epochs = settings["epochs"]
    for option, switch in type(criterion).switch_epochs.items():
        start = getattr(criterion, option)
        if start >= epochs:
            raise NoOpSettingError(
                f"{label}: {option}={start} >= epochs={epochs}, so {switch.what} never switches "
                f"on (the whole run would be {switch.before}); set {option} below epochs (the "
                f"official recipe: {switch.official}) or train for more epochs",
                f"loss_options.{option}")
