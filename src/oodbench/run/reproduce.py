"""``oodbench published reproduce``: a published row's recipe turned into an experiment.

It lives in ``run`` (not ``published``) because it writes experiments of the benchmarks'
built-in specs, a layer above the published tables (docs/architecture.md).

:func:`reproduction` reads the recipe of a row (:mod:`oodbench.published.recipes`) and builds:

- ``experiment.toml``: the row's model (or the training config's model where the method
  trains), detector with its preset and hyper-parameters (and its tuning protocol), fit data
  (and the transform it is read with: ``[id] fit_transform``) and benchmark, with the data below ``--data-root`` laid out as the benchmark's spec and the dataset
  catalogue say (``oodbench data info NAME``); its output is the folder itself, so
  ``oodbench published compare DIR`` reads the results next to it;
- ``train.toml`` where the method trains (the recipe's loss and its parameters, optimiser,
  learning rate, weight decay, schedule, batch, epochs, precision);
- ``reproduce.toml``: the recipe, the rows it reproduces and every *named difference*: a setting
  the recipe leaves ``unknown`` (oodbench's documented default is used: :data:`DEFAULTS` and the
  training config's defaults), a setting oodbench's files cannot express (written as "not
  applied"), and each explicit override (``--model``, ``--weights``, ``--random-init``).

Where the recipe names the released checkpoint (``model.file``), the experiment loads it from
below ``--data-root`` (or from ``--weights`` given a file of that name, not an override), with
the recipe's ``model.num_classes``; for a method that trains, the released weights stand in for
the training run (no ``train.toml``). A missing checkpoint is listed with the missing data,
with where to download it.

:func:`missing_data` lists each dataset that is not where the experiment reads it; the command
line prints them in one message with their ``oodbench data info`` / ``download`` commands and
exits with status 2 after the files are written.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from oodbench.errors import InvalidInputError, MissingDataError, UnknownNameError
from oodbench.published.recipes import Recipe, Sourced, for_table, recipe

#: oodbench's documented defaults for a recipe setting that is ``unknown``
DEFAULTS: dict[str, Any] = {
    "detector.name": "msp",
    "detector.preset": "",
    "detector.hyperparams": {},
    "evaluation.fit_data": "the detector preset's fit data",
    "evaluation.tuning": "none",
    "evaluation.benchmark": "openood-v1.5-imagenet",
    "preprocessing": "the model's own data config (timm's pretrained config, open_clip's transform)",
}
#: the training settings that map onto the training config's keys one to one
TRAIN_KEYS = ("lr", "weight_decay", "batch_size", "epochs")
#: recipe precision -> the training config's ``amp``
PRECISION = {"fp32": "off", "bf16": "bf16", "fp16": "fp16"}
#: benchmark -> (folder of the ID training images below the data root, its catalogue entry)
TRAIN_FOLDERS = {
    "mos-imagenet": ("id_data/ILSVRC-2012/train", "imagenet-1k-train"),
    "openood-v1.5-imagenet": ("images_largescale/imagenet_1k/train", "imagenet-1k-train"),
    "cood": ("imagenet-1k/train", "imagenet-1k-train"),
}
#: the C-OOD benchmark's data below the root: ID validation images and the class pool
#: (folder below the root, catalogue entry): the ID test images, the pool list, the pool's images
COOD_ID = ("imagenet-1k/val", "imagenet-1k-val")
COOD_POOL_LIST = "cood/pool.txt"
COOD_POOL = ("imagenet21k", "imagenet-21k-winter21")


@dataclass(frozen=True)
class Difference:
    """A setting the written files do not take from the recipe as it stands, and why."""

    setting: str
    recipe: str
    used: str
    why: str

    def text(self) -> str:
        return f"{self.setting}: recipe {self.recipe}; oodbench uses {self.used} ({self.why})"


@dataclass(frozen=True)
class DataNeed:
    """A path the experiment reads, the catalogue's dataset it holds, and its role."""

    role: str
    dataset: str
    paths: tuple[Path, ...]
    #: where to get a file that is no catalogue dataset (e.g. CMA's fixed negative list)
    how: str = ""

    def present(self) -> bool:
        return all(p.exists() for p in self.paths)


@dataclass
class Reproduction:
    """What ``reproduce`` writes for one recipe (see the module docstring)."""

    recipe: Recipe
    table: str
    data_root: Path
    experiment: dict[str, Any]
    train: dict[str, Any] | None
    differences: list[Difference] = field(default_factory=list)
    data: list[DataNeed] = field(default_factory=list)

    def record(self) -> dict[str, Any]:
        """``reproduce.toml``: the recipe, its rows and the named differences."""
        r = self.recipe
        return {
            "reproduce": {"table": self.table, "recipe": r.id, "recipe_file": r.file,
                          "family": r.family, "paper": r.paper, "code": r.code,
                          "rows": [dict(sel) for sel in r.entry.rows],
                          "data_root": str(self.data_root), "note": r.entry.note},
            "differences": [dataclasses.asdict(d) for d in self.differences],
        }


# -- choosing the recipe ------------------------------------------------------------------------
def choose(table: str, method: str | None = None, recipe_id: str | None = None) -> Recipe:
    """The one recipe of ``table``'s rows of ``method`` (or the recipe ``recipe_id``)."""
    if recipe_id is not None:
        chosen = recipe(recipe_id)
        if not any(sel.get("table") == table for sel in chosen.entry.rows):
            raise InvalidInputError(f"recipe {recipe_id!r} is not the recipe of any row of table "
                                    f"{table!r}")
        return chosen
    if method is None:
        raise InvalidInputError("reproduce needs --method METHOD (as the table prints it) or "
                                "--recipe ID")
    found = for_table(table, method)
    if not found:
        raise InvalidInputError(f"no recipe covers the rows of {method!r} in {table!r}")
    if len(found) > 1:
        raise InvalidInputError(
            f"{method!r} has {len(found)} recipes in {table!r}: pass --recipe with one of "
            + ", ".join(f"{r.id} ({_rows_text(r)})" for r in found))
    return found[0]


def _rows_text(r: Recipe) -> str:
    return "; ".join(", ".join(f"{k}={v}" for k, v in sel.items() if k != "table")
                     for sel in r.entry.rows)


# -- building the files -------------------------------------------------------------------------
def _shown(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def _setting(r: Recipe, section: str, key: str) -> Sourced | None:
    return r.section(section).get(key)


def _known(r: Recipe, section: str, key: str, diffs: list[Difference], default: Any,
           default_text: str | None = None) -> Any:
    """The recipe's value of a setting, or ``default`` (named as a difference) when unknown."""
    got = _setting(r, section, key)
    if got is not None and got.known:
        return got.value
    diffs.append(Difference(f"{section}.{key}", "unknown" if got is not None else "not given",
                            default_text or _shown(default), "oodbench's default"))
    return default


def _not_applied(diffs: list[Difference], setting: str, value: Any, why: str) -> None:
    diffs.append(Difference(setting, _shown(value), "not applied", why))


def reproduction(table: str, method: str | None = None, *, recipe_id: str | None = None,
                 data_root: str | Path = "data", model: str | None = None,
                 weights: str | Path | None = None, random_init: bool = False,
                 train_file: str = "train.toml") -> Reproduction:
    """The files that reproduce a published row (see the module docstring).

    ``model`` replaces the recipe's model spec, ``weights`` loads a checkpoint into it (e.g.
    the released one), ``random_init`` keeps the architecture at random initialisation (a
    stand-in: the model is named ``"<spec> (random init)"``, so a comparison calls its weights
    different); each is a named difference.
    """
    r = choose(table, method, recipe_id)
    root = Path(data_root).expanduser().absolute()
    diffs: list[Difference] = []
    data: list[DataNeed] = []
    model_entry, train = _model(r, root, diffs, model, weights, random_init, train_file, data)
    spec = str((train or {}).get("model", model_entry).get("spec", ""))
    diffs[:0] = preprocessing_differences(r, model_preprocessing(spec))
    detector = _detector(r, diffs)
    benchmark = str(_known(r, "evaluation", "benchmark", diffs, DEFAULTS["evaluation.benchmark"]))
    _detector_files(r, detector, root, data)
    fit = _fit_data(r, detector, diffs)
    experiment: dict[str, Any] = {
        "experiment": {"name": r.id, "output": "."},
        "models": [model_entry],
    }
    ids, bench = _benchmark(benchmark, root, fit, detector, data)
    transform = _fit_transform(r, "fit" in ids, diffs)
    if transform is not None:
        ids["fit_transform"] = transform
    if ids:
        experiment["id"] = ids
    experiment["benchmarks"] = [bench]
    experiment["detectors"] = [detector]
    if train is not None:
        folder, dataset = TRAIN_FOLDERS.get(benchmark, TRAIN_FOLDERS["openood-v1.5-imagenet"])
        if not any(d.role == "ID training images" for d in data):
            data.append(DataNeed("ID training images", dataset, (root / folder,)))
        train["data"] = {"train": {"folder": str(root / folder)}}
    return Reproduction(r, table, root, experiment, train, diffs, data)


def model_preprocessing(spec: str) -> dict[str, Any] | None:
    """The eval preprocessing oodbench applies for a ``timm:`` spec (its pretrained config:
    resize = size / crop fraction, as timm's transform) or for a family whose loader module
    declares it (``PREPROCESSING``: ``bit:``, ``supcon:``, ``mmcls:``); ``None`` for others."""
    if not spec.startswith("timm:"):
        import importlib

        from oodbench.errors import OodbenchError
        from oodbench.models.registry import parse_spec

        try:
            family = parse_spec(spec)[1]
        except OodbenchError:
            return None
        module = importlib.import_module(family.loader.partition(":")[0])
        declared = getattr(module, "PREPROCESSING", None)
        return dict(declared) if declared is not None else None
    import timm

    cfg = timm.models.get_pretrained_cfg(spec.split(":", 1)[1])
    if cfg is None:
        return None
    size = int(cfg.input_size[-1])
    return {"resize": int(math.floor(size / cfg.crop_pct)), "crop_fraction": float(cfg.crop_pct),
            "interpolation": str(cfg.interpolation), "mean": [float(v) for v in cfg.mean],
            "std": [float(v) for v in cfg.std]}


def _same(a: Any, b: Any) -> bool:
    # recipe values are printed constants (0.875, 0.48145466): equal to 1e-6 relative
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return math.isclose(float(a), float(b), rel_tol=1e-6)
    return str(a).lower() == str(b).lower()


def preprocessing_differences(r: Recipe, applied: Mapping[str, Any] | None) -> list[Difference]:
    """The recipe's preprocessing against what oodbench applies (``applied``, from
    :func:`model_preprocessing`; ``None``: not known without loading the model)."""
    out = []
    for key, got in r.section("preprocessing").items():
        have = None if applied is None else applied.get(key)
        used = (_shown(have) + " (the model's data config)" if have is not None
                else DEFAULTS["preprocessing"])
        if not got.known:
            out.append(Difference(f"preprocessing.{key}", "unknown", used, "oodbench's default"))
        elif have is None:
            out.append(Difference(f"preprocessing.{key}", _shown(got.value), used,
                                  "not checked: an experiment takes the model's own data config"))
        elif not _same(got.value, have):
            out.append(Difference(f"preprocessing.{key}", _shown(got.value), used,
                                  "the model's data config differs; an experiment cannot change it"))
    return out


def _model(r: Recipe, root: Path, diffs: list[Difference], model: str | None,
           weights: str | Path | None, random_init: bool, train_file: str,
           data: list[DataNeed]) -> tuple[dict[str, Any], dict[str, Any] | None]:
    spec_setting = _setting(r, "model", "spec")
    spec = model or (spec_setting.value if spec_setting is not None and spec_setting.known
                     else None)
    if spec is None:
        released = _setting(r, "model", "released")
        state = ("its weights were never released" if released is not None
                 and released.value is False else "no oodbench spec loads its weights")
        raise InvalidInputError(
            f"recipe {r.id!r}: {state} ({spec_setting.source if spec_setting else 'no spec'}); "
            "pass --model SPEC (an oodbench model spec of the same architecture; named as a "
            "difference)")
    if model is not None:
        diffs.append(Difference("model.spec", _shown(spec_setting.value) if spec_setting else
                                "not given", model, "override --model"))
    entry: dict[str, Any] = {"spec": spec, "name": spec}
    num_classes = r.value("model", "num_classes")
    if num_classes is not None and model is None:
        entry["num_classes"] = num_classes
    file = _setting(r, "model", "file")
    if file is not None and file.known and model is None and not random_init and (
            weights is None or Path(weights).name == Path(file.value).name):
        # the released checkpoint: below the data root, or where --weights says (same file name)
        path = (root / file.value) if weights is None else Path(weights).expanduser().absolute()
        entry["weights"], entry["name"] = str(path), f"{spec} + {path.name}"
        data.append(DataNeed("model weights", path.name, (path,),
                             how=f"get the checkpoint: {file.source}"))
        return entry, None  # the released weights: no training run, where the method trains
    if weights is not None:
        entry["weights"] = str(Path(weights).expanduser().absolute())
        entry["name"] = f"{spec} + {Path(weights).name}"
        diffs.append(Difference("model.weights", _shown(r.value("model", "weights", "unknown")),
                                str(weights), "override --weights"))
    if random_init:
        entry["pretrained"] = False
        entry["name"] = f"{spec} (random init)"
        diffs.append(Difference("model.weights", _shown(r.value("model", "weights", "unknown")),
                                "random initialisation", "override --random-init (a stand-in)"))
    if not r.trains or weights is not None:
        return entry, None
    train = _training(r, diffs)
    return {"name": f"{r.id} (trained by train.toml)", "train": train_file}, {
        "train": train, "model": {k: v for k, v in entry.items() if k != "name"}}


def _training(r: Recipe, diffs: list[Difference]) -> dict[str, Any]:
    from oodbench.train.config import TrainSettings

    defaults = {k: f.default for k, f in TrainSettings.model_fields.items()}
    out: dict[str, Any] = {"name": r.id}
    out["loss"] = _known(r, "training", "loss", diffs, defaults["loss"])
    params = _known(r, "training", "loss_params", diffs, {}, "the loss's own defaults")
    if params:
        out["loss_options"] = dict(params)
    for key in TRAIN_KEYS:
        out[key] = _known(r, "training", key, diffs, defaults[key])
    optimizer = _known(r, "training", "optimizer", diffs, defaults["optimizer"])
    if optimizer in ("sgd", "adamw"):
        out["optimizer"] = optimizer
    else:
        _not_applied(diffs, "training.optimizer", optimizer, f"oodbench trains with sgd or adamw; "
                     f"{defaults['optimizer']} is used")
    schedule = _known(r, "training", "schedule", diffs, defaults["schedule"])
    if schedule in ("cosine", "constant"):
        out["schedule"] = schedule
    else:
        _not_applied(diffs, "training.schedule", schedule,
                     f"oodbench's schedules are cosine and constant; {defaults['schedule']} is used")
    trainable = _known(r, "training", "trainable", diffs, defaults["trainable"])
    if trainable in ("head", "last_block", "all"):
        out["trainable"] = trainable
    else:
        _not_applied(diffs, "training.trainable", trainable,
                     "set by the loss's own options where it has them")
    warmup = _setting(r, "training", "warmup")
    if warmup is not None and warmup.known and warmup.value != "none":
        if isinstance(warmup.value, Mapping) and set(warmup.value) == {"epochs"}:
            out["warmup_epochs"] = int(warmup.value["epochs"])
        elif (isinstance(warmup.value, Mapping) and set(warmup.value) == {"steps"}
              and out.get("loss_options", {}).get("warmup_steps") == warmup.value["steps"]):
            pass  # the loss's own option (CMA's warmup_steps) applies it
        else:
            _not_applied(diffs, "training.warmup", warmup.value,
                         "a warm-up in steps is the loss's own option where it has one")
    precision = _known(r, "training", "precision", diffs, defaults["amp"])
    if precision in PRECISION:
        out["amp"] = PRECISION[precision]
    elif precision != defaults["amp"]:
        _not_applied(diffs, "training.precision", precision, "no matching amp setting")
    for key in ("augmentation", "prompts"):
        got = _setting(r, "training", key)
        if got is not None:
            if got.known and _loss_default_applies(str(out["loss"]), key, got.value,
                                                   out.get("loss_options", {})):
                continue  # the loss's published default (oodbench.train.method_defaults)
            if got.known:
                _not_applied(diffs, f"training.{key}", got.value,
                             "the training config has no such setting")
            else:
                diffs.append(Difference(f"training.{key}", "unknown", "the trainer's own",
                                        "oodbench's default"))
    return out


def _loss_default_applies(loss: str, key: str, value: Any, options: Mapping[str, Any]) -> bool:
    """Whether training with ``loss`` applies the recipe's ``augmentation`` or ``prompts``
    without a setting in the training config: the loss's published defaults
    (:mod:`oodbench.train.method_defaults`, ``oodbench.losses``) are those of the recipe."""
    from oodbench.train.method_defaults import defaults_for

    text = str(value)
    if key == "augmentation":
        aug = defaults_for(loss).augmentation
        return aug is not None and (f"scale=({aug.scale[0]}, {aug.scale[1]})" in text
                                    and aug.interpolation in text)
    if loss == "cma":  # the prompt CMA trains against is its loss option train_prompt
        return bool(value == [options.get("train_prompt")])
    if loss == "npos":  # the head is rebuilt with the official 18 templates by default
        from oodbench.losses.npos import NPOS

        head = inspect.signature(NPOS.__init__).parameters["head_templates"].default
        return head == "npos" and "18" in text
    return False


def _detector(r: Recipe, diffs: list[Difference]) -> dict[str, Any]:
    from oodbench.detectors import detector_class

    name = str(_known(r, "detector", "name", diffs, DEFAULTS["detector.name"]))
    preset = str(_known(r, "detector", "preset", diffs, DEFAULTS["detector.preset"],
                        "no preset (the class defaults)"))
    hyper = dict(_known(r, "detector", "hyperparams", diffs, {}, "no extra hyper-parameters"))
    accepted = {f.name for f in dataclasses.fields(detector_class(name))}
    for key in sorted(set(hyper) - accepted):
        _not_applied(diffs, f"detector.hyperparams.{key}", hyper.pop(key),
                     f"oodbench's {name} takes no {key!r}")
    entry: dict[str, Any] = {"name": name, "preset": preset}
    if hyper:
        entry["hyperparams"] = hyper
    tuning = _known(r, "evaluation", "tuning", diffs, DEFAULTS["evaluation.tuning"])
    if isinstance(tuning, Mapping):
        entry["tune"] = dict(tuning)
    elif tuning != "none":
        _not_applied(diffs, "evaluation.tuning", tuning, "no tuning protocol of that name")
    return entry


#: hyper-parameters that name a file, relative to the data root in a recipe
DETECTOR_FILES = {"negatives": "the fixed negative-prompt list",
                  "groups": "the official class-group list"}


def _detector_files(r: Recipe, detector: dict[str, Any], root: Path,
                    data: list[DataNeed]) -> None:
    """Point each file-valued hyper-parameter below ``root`` and record it as data the
    experiment reads (a missing one is listed with the datasets, with the official code's
    repository to take it from)."""
    hyper = detector.get("hyperparams", {})
    stated = _setting(r, "detector", "hyperparams")
    code = r.code or (stated.source if stated is not None else r.paper)
    for key, role in DETECTOR_FILES.items():
        if isinstance(hyper.get(key), str):
            path = root / hyper[key]
            hyper[key] = str(path)
            data.append(DataNeed(f"{role} of {detector['name']}", Path(path).name, (path,),
                                 how=f"take it from the official code, {code}"))


def _fit_data(r: Recipe, detector: Mapping[str, Any], diffs: list[Difference]) -> str:
    from oodbench.detectors import detector_class, preset_for

    got = _setting(r, "evaluation", "fit_data")
    if got is not None and got.known:
        return str(got.value)
    own = (preset_for(detector["name"], detector["preset"]).fit_data if detector["preset"]
           else getattr(detector_class(detector["name"]), "fit_data", "train"))
    diffs.append(Difference("evaluation.fit_data", "unknown", str(own or "none"),
                            "oodbench's default: the detector's own"))
    return str(own or "none")


def _fit_transform(r: Recipe, reads_fit: bool, diffs: list[Difference]) -> str | None:
    """The recipe's ``evaluation.fit_transform`` for ``[id] fit_transform`` (``None``: leave it
    out, the evaluation transform); an ``unknown`` one, or one for an experiment without
    ``[id] fit``, is a named difference."""
    from oodbench.models.fit_transforms import DEFAULT_FIT_TRANSFORM

    got = _setting(r, "evaluation", "fit_transform")
    if got is None:
        return None
    if not got.known:
        diffs.append(Difference("evaluation.fit_transform", "unknown", DEFAULT_FIT_TRANSFORM,
                                "oodbench's default: the model's evaluation transform"))
        return None
    if not reads_fit:
        if got.value != DEFAULT_FIT_TRANSFORM:
            _not_applied(diffs, "evaluation.fit_transform", got.value,
                         "no detector of the experiment reads [id] fit")
        return None
    return None if got.value == DEFAULT_FIT_TRANSFORM else str(got.value)


def _benchmark(name: str, root: Path, fit: str, detector: Mapping[str, Any],
               data: list[DataNeed]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The ``[id]`` sources and the benchmark entry of ``name`` below ``root``; records each
    dataset the experiment reads in ``data``."""
    ids: dict[str, Any] = {}
    tune = detector.get("tune") or {}
    if name == "cood":
        folder, dataset = COOD_ID
        pool_root, pool_set = COOD_POOL
        ids["test"] = {"folder": str(root / folder)}
        data.append(DataNeed("ID test set", dataset, (root / folder,)))
        data.append(DataNeed("C-OOD class pool", pool_set,
                             (root / COOD_POOL_LIST, root / pool_root)))
        bench = {"type": "cood", "name": "cood", "n_levels": 11,
                 "pool": {"list": str(root / COOD_POOL_LIST), "root": str(root / pool_root)}}
    else:
        from oodbench.benchmarks.files import SetSpec, builtin

        spec = builtin(name)
        needed: list[tuple[str, str, SetSpec | None]] = [("id", "ID test set", spec.id)]
        needed += [(s.group, f"OOD set {s.group!r}", s) for s in spec.ood]
        if fit == "id_val" or tune.get("protocol") == "ood_val":
            needed.append(("id_val", "ID validation set", spec.id_val))
        if tune.get("protocol") == "ood_val":
            needed.append(("ood_val", "OOD validation set", spec.ood_val))
        for key, role, s in needed:
            if s is None:
                continue
            paths = ((root / s.list, root / s.images) if s.source == "imglist"
                     else (root / s.path,))
            data.append(DataNeed(role, s.dataset or name, paths))
            if key in ("id_val", "ood_val"):
                source = ({"list": str(root / s.list), "root": str(root / s.images)}
                          if s.source == "imglist" else {"folder": str(root / s.path)})
                if key == "id_val":
                    ids["val"] = source
                if key == "ood_val" or (key == "id_val" and tune):
                    tune[{"id_val": "id_val", "ood_val": "ood"}[key]] = source
        bench = {"type": "standard", "name": name, "options": {"root": str(root)}}
    if fit == "train" or tune:  # a tuned detector is tuned on [id] fit (experiment.py)
        folder, dataset = TRAIN_FOLDERS.get(name, TRAIN_FOLDERS["openood-v1.5-imagenet"])
        ids["fit"] = {"folder": str(root / folder)}
        data.append(DataNeed("ID training images", dataset, (root / folder,)))
    return ids, bench


# -- data, files --------------------------------------------------------------------------------
def missing_data(repro: Reproduction) -> list[DataNeed]:
    """The datasets the experiment reads that are not where it reads them (one per dataset)."""
    missing: dict[str, DataNeed] = {}
    for need in repro.data:
        if not need.present() and need.dataset not in missing:
            missing[need.dataset] = need
    return list(missing.values())


def missing_message(repro: Reproduction, missing: Sequence[DataNeed], out: Path) -> str:
    """One message listing each missing dataset with its ``oodbench data`` commands."""
    from oodbench.data import catalog

    lines = [f"reproduce {repro.recipe.id}: {len(missing)} dataset(s) are not under "
             f"{repro.data_root} (the files are written to {out}; run `oodbench run "
             f"{out / 'experiment.toml'}` once the data is there):"]
    for need in missing:
        absent = " and ".join(str(p) for p in need.paths if not p.exists())
        if need.how:
            lines.append(f"  {need.dataset} ({need.role}): expected at {absent}; {need.how}")
            continue
        commands = [f"oodbench data info {need.dataset}"]
        try:
            downloadable = bool(catalog.get(need.dataset).public_downloads)
        except UnknownNameError:  # a set its benchmark spec names no catalogue entry for
            downloadable, commands = False, [f"oodbench list benchmarks ({need.dataset})"]
        if downloadable:  # where its archive unpacks: `oodbench data info`
            commands.append(f"oodbench data download {need.dataset} DIR")
        lines.append(f"  {need.dataset} ({need.role}): expected at {absent}; "
                     + "; ".join(commands))
    return "\n".join(lines)


def toml_value(value: Any) -> str:
    """One TOML value (strings, numbers, booleans, lists, inline tables)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        if isinstance(value, float) and not math.isfinite(value):
            raise InvalidInputError(f"TOML has no value for {value}")
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, Path):
        return json.dumps(str(value), ensure_ascii=False)
    if isinstance(value, Mapping):
        inner = ", ".join(f"{_key(k)} = {toml_value(v)}" for k, v in value.items()
                          if v is not None)
        return "{ " + inner + " }" if inner else "{}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    raise InvalidInputError(f"cannot write {value!r} to TOML")


def _key(key: str) -> str:
    return key if key.replace("_", "").replace("-", "").isalnum() else json.dumps(key)


def toml_text(data: Mapping[str, Any], header: str = "") -> str:
    """A document of tables (``[name]``) and arrays of tables (``[[name]]``) of plain values."""
    lines = [f"# {line}" if line else "#" for line in header.splitlines()]
    for name, body in data.items():
        items = body if isinstance(body, list) else [body]
        for item in items:
            lines.append("")
            lines.append(f"[[{name}]]" if isinstance(body, list) else f"[{name}]")
            lines += [f"{_key(k)} = {toml_value(v)}" for k, v in item.items() if v is not None]
    return "\n".join(lines) + "\n"


def write(repro: Reproduction, out: str | Path) -> list[Path]:
    """Write ``experiment.toml`` (and ``train.toml``, ``reproduce.toml``) into ``out``."""
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    r = repro.recipe
    header = (f"Written by `oodbench published reproduce {repro.table} --recipe {r.id}` from the "
              f"recipe {r.id}\n({r.file}; {r.paper}). Named differences from the recipe: "
              f"{len(repro.differences)}\n(each in reproduce.toml):\n"
              + "\n".join(f"  {d.text()}" for d in repro.differences))
    written = [folder / "experiment.toml"]
    written[0].write_text(toml_text(repro.experiment, header), encoding="utf-8")
    if repro.train is not None:
        written.append(folder / "train.toml")
        written[-1].write_text(toml_text(repro.train, f"The training recipe of {r.id} "
                                         "(see experiment.toml's header)."), encoding="utf-8")
    written.append(folder / "reproduce.toml")
    written[-1].write_text(toml_text(repro.record(), f"How {folder / 'experiment.toml'} "
                                     "was made from its recipe."), encoding="utf-8")
    return written


def read_record(folder: str | Path) -> dict[str, Any] | None:
    """``reproduce.toml`` of a folder written by :func:`write` (``None`` when there is none)."""
    from oodbench.schema import loads_toml

    path = Path(folder) / "reproduce.toml"
    if not path.is_file():
        return None
    return loads_toml(path.read_text(encoding="utf-8"), origin=str(path))


def check_data(repro: Reproduction, out: Path) -> None:
    """``MissingDataError`` (exit status 2) listing every missing dataset, if any."""
    missing = missing_data(repro)
    if missing:
        raise MissingDataError(missing_message(repro, missing, out))
