"""One schema mechanism for every configuration file: pydantic models and one TOML reader.

Experiments, training configs, benchmark files, detector presets, the dataset catalogue, the
published tables' catalogue and the tuning paper's search spaces are all parsed by
:func:`loads_toml` (files: :func:`read_toml`; files shipped inside the package:
:func:`package_file`) and validated by :func:`parse` (text: :func:`parse_toml`; a file, read
and validated in one call: :func:`load`).

A configuration section is a :class:`Schema` (a frozen pydantic model); a file is read and
validated with :func:`load` (:func:`read_toml`, then :func:`parse`)::

    class Section(Schema):
        batch_size: StrictInt = Field(64, description="images per forward pass")

    section, text = load(Section, path, what="experiment file", error=ExperimentError,
                         context={"base_dir": ...})

Every mistake becomes one :class:`~oodbench.errors.ConfigError` (the subclass given) with one
line per problem, ``file: where: what is wrong and the fix``, where ``where`` is written the
way the TOML file is: ``[experiment].batch_size``, ``[[models]] #2.factory``,
``[[detectors]] #1.grid.k`` (arrays of tables are named in ``ARRAY_SECTIONS``). A validator
that knows better where a problem lies raises :class:`At` with that location.

Unknown keys are reported with the closest valid key; missing required keys with the field's
``description``; a plain string is short for a one-key table when the model names its
``shorthand`` key (``"msp"`` for ``{ name = "msp" }``). Relative paths (:data:`ConfigPath`)
are resolved against ``context["base_dir"]`` (the folder of the file).

Files whose top-level keys are names (``[<dataset>]``, ``[<detector>]``) are a
``pydantic.RootModel`` of a dict; value objects that must stay plain dataclasses (positional
construction, ``dataclasses.replace``) are validated as ``Annotated[Cls, CHECKED_KEYS]``, which
checks their keys as a :class:`Schema` does, and :func:`named_entries` passes each entry's
table name as its ``name``.
"""

from __future__ import annotations

import dataclasses
import difflib
import sys
from collections.abc import Mapping, Sequence
from importlib import resources
from pathlib import Path
from typing import Annotated, Any, ClassVar, TypeVar

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    GetCoreSchemaHandler,
    ValidationError,
    ValidationInfo,
    model_validator,
)
from pydantic_core import core_schema

from oodbench.errors import ConfigError, InvalidInputError, MissingDataError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

#: top-level keys written as arrays of tables (``[[models]]``) in every config format
ARRAY_SECTIONS = frozenset({"models", "benchmarks", "detectors", "losses", "ood"})
#: loc parts added by tagged unions (``Tag("type=cood")``): not keys of the file
TAG_PREFIX = "type="

M = TypeVar("M", bound=BaseModel)
T = TypeVar("T")


class DeprecatedKeyWarning(FutureWarning):
    """A configuration file uses a key under its old name (it still works; rename it)."""


class At(ValueError):
    """A validation problem whose location the validator knows better than pydantic
    (e.g. a check across sections): ``raise At("[id]", "add a test set ...")``."""

    def __init__(self, where: str, message: str):
        super().__init__(message)
        self.where, self.message = where, message


class Schema(BaseModel):
    """Base of every configuration section: frozen, strict about unknown keys.

    Subclasses may set ``shorthand`` (the key a plain string stands for) and override
    :meth:`prepare` to normalise the raw table before field validation. A table whose other keys
    are names (``spaces.toml``: ``k = { low, high }``) sets ``extra="allow"`` with a typed
    ``__pydantic_extra__`` and checks those keys in :meth:`prepare`.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", arbitrary_types_allowed=True)

    shorthand: ClassVar[str | None] = None

    @model_validator(mode="before")
    @classmethod
    def _check_table(cls, data: Any, info: ValidationInfo) -> Any:
        if isinstance(data, cls):
            return data
        if isinstance(data, str) and cls.shorthand is not None:
            data = {cls.shorthand: data}
        if not isinstance(data, Mapping):
            raise ValueError(f"expected a table ({{ key = value }}), got {data!r}")
        data = cls.prepare(dict(data), info)
        keys = table_keys(cls)
        if cls.model_config.get("extra") == "allow":  # keys that are names: prepare checks them
            keys = {**{key: (False, "") for key in data}, **keys}
        check_keys(data, keys)
        return data

    @classmethod
    def prepare(cls, data: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
        """Hook: normalise the raw table (defaults that depend on other keys or the context)."""
        return data


#: a table's keys -> (required, description)
Keys = Mapping[str, tuple[bool, str]]


def table_keys(cls: Any) -> dict[str, tuple[bool, str]]:
    """The keys of a :class:`Schema` (or a dataclass) as a table: key -> (required, description)."""
    if isinstance(cls, type) and issubclass(cls, BaseModel):
        return {spec.alias or name: (spec.is_required(), spec.description or "")
                for name, spec in cls.model_fields.items()}
    return {f.name: (f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING, "")
            for f in dataclasses.fields(cls)}


def unknown_key(key: str, valid: Sequence[str]) -> str:
    """The message for a key that is not one of ``valid``, with the closest valid key."""
    close = difflib.get_close_matches(str(key), list(valid), n=1)
    hint = f"did you mean {close[0]!r}? " if close else ""
    return f"unknown key {key!r}; {hint}valid keys: {', '.join(valid)}"


def check_keys(data: Mapping[str, Any], keys: Keys) -> None:
    """``ValueError`` for an unknown key (naming the closest valid one) or a missing required one
    (with its description)."""
    for key in data:
        if key not in keys:
            raise ValueError(unknown_key(key, list(keys)))
    for key, (required, description) in keys.items():
        if required and key not in data:
            what = f" ({description})" if description else ""
            raise ValueError(f"missing required key {key!r}{what}")


class _CheckedKeys:
    """Pydantic marker: ``Annotated[SomeDataclass, CHECKED_KEYS]`` checks the keys of the table
    a dataclass is validated from as a :class:`Schema` does (pydantic ignores unknown ones).
    ``hidden`` keys are allowed but not the file's to write (a name passed in from outside)."""

    def __init__(self, hidden: frozenset[str] = frozenset()) -> None:
        self.hidden = hidden

    def __get_pydantic_core_schema__(self, source: Any, handler: GetCoreSchemaHandler) -> Any:
        keys = {k: v for k, v in table_keys(source).items() if k not in self.hidden}

        def check(value: Any) -> Any:
            if isinstance(value, Mapping):
                check_keys({k: v for k, v in value.items() if k not in self.hidden}, keys)
            return value

        return core_schema.no_info_before_validator_function(check, handler(source))


CHECKED_KEYS = _CheckedKeys()


def named_entries(value: Any) -> Any:
    """Before-validator of a table of named tables (``[<name>]``): each entry gets its table's
    name as ``name`` (which the entry itself must not set)."""
    if not isinstance(value, Mapping):
        return value
    out = {}
    for name, entry in value.items():
        if isinstance(entry, Mapping):
            if "name" in entry:
                raise ValueError(f"entry {name!r} sets 'name'; an entry is named by its table, remove it")
            entry = {**entry, "name": name}
        out[name] = entry
    return out


#: a table of named tables, each a dataclass ``T`` whose ``name`` is its table's name
#: (``[protocols.<name>]``, ``[<dataset>]``); the entries' keys are checked as a Schema's
NamedEntries = Annotated[dict[str, Annotated[T, _CheckedKeys(frozenset({"name"}))]],
                         BeforeValidator(named_entries)]


def context_of(info: ValidationInfo) -> Mapping[str, Any]:
    """The validation context (``parse(..., context=)``), empty when none was given."""
    return info.context or {}


def _resolve_path(value: Any, info: ValidationInfo) -> Path:
    if isinstance(value, Path):
        return value
    if not isinstance(value, str) or not value:
        raise ValueError(f"expected a path (a non-empty string), got {value!r}")
    path = Path(value).expanduser()
    if path.is_absolute():
        return path
    base = Path(context_of(info).get("base_dir", Path.cwd()))
    return (base / path).resolve()


#: a path in a configuration file: relative paths are relative to the file's folder
ConfigPath = Annotated[Path, BeforeValidator(_resolve_path)]


def _nonempty_array(value: Any) -> tuple[Any, ...]:
    if not isinstance(value, (list, tuple)) or not value:
        raise ValueError(f"expected a non-empty array, got {value!r}")
    return tuple(value)


def one_of(valid: Sequence[Any]) -> AfterValidator:
    """``Annotated[str, one_of(NAMES)]``: a value that must be one of ``valid`` (``None``, the
    default of an optional key, passes)."""
    def check(value: Any) -> Any:
        if value is not None and value not in valid:
            raise ValueError(f"expected one of {tuple(valid)}, got {value!r}")
        return value

    return AfterValidator(check)


#: a non-empty TOML array (kept as a tuple)
NonEmptyArray = Annotated[tuple[Any, ...], BeforeValidator(_nonempty_array)]


def where(loc: Sequence[Any]) -> str:
    """A pydantic error location written the TOML way (``[[models]] #2.factory``)."""
    parts = [p for p in loc if not (isinstance(p, str) and p.startswith(TAG_PREFIX))]
    if not parts:
        return "top level"
    head, *rest = parts
    array = head in ARRAY_SECTIONS and (not rest or isinstance(rest[0], int))
    text = f"[[{head}]]" if array else f"[{head}]"
    for part in rest:
        text += f" #{part + 1}" if isinstance(part, int) else f".{part}"
    return text


_TYPE_NAMES = {
    "int_type": "int", "int_parsing": "int", "string_type": "str", "bool_type": "bool",
    "float_type": "float", "float_parsing": "float", "dict_type": "table", "list_type": "array",
    "tuple_type": "array", "mapping_type": "table",
}


def _message(error: Mapping[str, Any]) -> tuple[str, str]:
    """``(where, message)`` of one pydantic error."""
    kind, loc, ctx = error["type"], error["loc"], error.get("ctx") or {}
    cause = ctx.get("error")
    if isinstance(cause, At):
        return cause.where, cause.message
    if kind in ("value_error", "assertion_error") and cause is not None:
        return where(loc), str(cause)
    if kind in ("union_tag_invalid", "union_tag_not_found"):
        label = str(ctx.get("discriminator", "type")).rstrip("()").replace("_", " ")
        tags = [t.strip(" '").removeprefix(TAG_PREFIX) for t in str(ctx.get("expected_tags", "")).split(",")]
        tags = [t for t in tags if t]
        if kind == "union_tag_invalid":
            return where(loc), f"unknown {label} {ctx.get('tag')!r}; use one of {', '.join(tags)}"
        return where(loc), f"missing required key 'type' ({label}; one of {', '.join(tags)})"
    if kind == "literal_error":
        return where(loc), f"expected one of {ctx.get('expected')}, got {error['input']!r}"
    if kind in _TYPE_NAMES:
        return where(loc), f"expected {_TYPE_NAMES[kind]}, got {error['input']!r}"
    return where(loc), str(error["msg"])


def format_errors(err: ValidationError, file: str) -> str:
    """One ``file: where: message`` line per problem (duplicates dropped)."""
    lines: list[str] = []
    for error in err.errors():
        w, message = _message(error)
        line = f"{file}: {w}: {message}"
        if line not in lines:
            lines.append(line)
    return "\n".join(lines)


def parse(
    model: type[M],
    data: Any,
    *,
    file: str | Path,
    error: type[ConfigError] = ConfigError,
    context: Mapping[str, Any] | None = None,
) -> M:
    """Validate ``data`` (a parsed TOML mapping) as ``model``; mistakes raise ``error``."""
    try:
        return model.model_validate(data, context=dict(context or {}))
    except ValidationError as err:
        raise error(format_errors(err, str(file))) from None


def parse_toml(
    model: type[M],
    text: str,
    *,
    file: str | Path,
    error: type[ConfigError] = ConfigError,
    context: Mapping[str, Any] | None = None,
) -> M:
    """TOML ``text`` (of ``file``) validated as ``model``: :func:`loads_toml`, then :func:`parse`."""
    data = loads_toml(text, origin=str(file), error=error)
    return parse(model, data, file=file, error=error, context=context)


def package_file(package: str, name: str) -> tuple[str, str]:
    """``(text, path)`` of a TOML file shipped inside ``package`` (``"oodbench.detectors"``)."""
    path = resources.files(package).joinpath(name)
    return path.read_text(encoding="utf-8"), str(path)


def load(
    model: type[M],
    path: str | Path,
    *,
    what: str,
    example: str | None = None,
    error: type[ConfigError] = ConfigError,
    context: Mapping[str, Any] | None = None,
) -> tuple[M, str]:
    """``(config, text)``: the TOML file at ``path`` read (:func:`read_toml`) and validated as
    ``model`` (:func:`parse`, mistakes naming the file) in one call, with the file's text."""
    data, text = read_toml(path, what=what, example=example, error=error)
    return parse(model, data, file=path, error=error, context=context), text


def read_toml(
    path: str | Path, *, what: str, example: str | None = None,
    error: type[ConfigError] = ConfigError,
) -> tuple[dict[str, Any], str]:
    """``(data, text)`` of a TOML file; a missing file or invalid TOML names the fix.

    ``what`` names the kind of file (``"experiment file"``), ``example`` a file to start from.
    """
    path = Path(path)
    if not path.is_file():
        see = f" (see {example})" if example else ""
        raise MissingDataError(f"{what} {path} does not exist; pass the path of a TOML {what}{see}")
    text = path.read_text(encoding="utf-8")
    return loads_toml(text, origin=str(path), error=error), text


def loads_toml(text: str, *, origin: str, error: type[InvalidInputError] = ConfigError
               ) -> dict[str, Any]:
    """TOML text as a dict; invalid TOML raises ``error`` naming ``origin`` (a file or the
    name of a table shipped with the package). The one TOML parser of every config format."""
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise error(f"{origin}: not valid TOML: {err}") from None
