"""The exceptions oodbench raises on bad input.

Every error names what is wrong (the file, the field, the value) and how to fix it. All derive
from :class:`OodbenchError`, so ``except OodbenchError`` catches every user-facing problem; each
also derives from the matching built-in (``ValueError``, ``KeyError``, ``FileNotFoundError``) so
generic handlers keep working.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class OodbenchError(Exception):
    """Base class of every error oodbench raises on bad input or state."""


class InvalidInputError(OodbenchError, ValueError):
    """An argument has the wrong shape, dtype, range or content."""


class ConfigError(InvalidInputError):
    """A configuration file (experiment, training) is invalid; each line names the file, the
    field and the fix (see :mod:`oodbench.schema`)."""


class ExperimentError(ConfigError):
    """The experiment file is invalid; the message names the file, the field and the fix."""


class NonFiniteError(InvalidInputError):
    """NaN (or, where not allowed, inf) values in scores, logits or features."""


class EmptyInputError(InvalidInputError):
    """An input that must hold samples is empty (an empty source, an empty OOD group)."""


class UndeterminedStatisticError(InvalidInputError):
    """The fit data cannot determine a detector's statistic (e.g. the NLL of temperature scaling
    has no finite minimiser on data the model classifies perfectly); the message says why."""


class ProtocolMismatchError(InvalidInputError):
    """Two numbers were made under different protocols (e.g. a C-OOD benchmark that differs
    from the paper's) and would be compared as if they were not."""


class NoOpSettingError(InvalidInputError):
    """A training setting would silently do nothing: the method ignores it (``warmup_epochs``
    with a loss that warms up by steps), or it keeps part of the method off for the whole run
    (NPOS's ``start_epoch`` >= ``epochs``); ``setting`` names it."""

    def __init__(self, message: str, setting: str = ""):
        super().__init__(message)
        self.setting = setting

    def __reduce__(self):  # type: ignore[no-untyped-def]  # keeps ``setting`` across processes
        return type(self), (str(self), self.setting)


class ClassCountMismatchError(InvalidInputError):
    """Labels refer to more classes than the model predicts, or a head does not match."""


class MissingActivationError(OodbenchError, KeyError):
    """A detector needs an activation (features, feature map, head weights) that was not captured."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class UnknownNameError(OodbenchError, KeyError):
    """An unknown registry name (detector, model, benchmark, dataset); suggests the closest ones.

    A short list of valid names (up to ``SHOW_ALL``) is printed whole; from a long one (timm's
    ~1,300 models) only the ``SUGGEST`` names most similar to the unknown one, best first.
    """

    SHOW_ALL = 40
    SUGGEST = 5

    def __init__(self, kind: str, name: str, valid: Iterable[str]):
        valid = sorted(valid)
        if len(valid) <= self.SHOW_ALL:
            close = difflib.get_close_matches(name, valid, n=3, cutoff=0.5)
            hint = f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""
            message = f"unknown {kind} {name!r}.{hint} Valid names: {', '.join(valid)}"
        else:
            close = closest_names(name, valid, self.SUGGEST)
            message = (f"unknown {kind} {name!r}. Did you mean {', '.join(repr(c) for c in close)}? "
                       f"(the {len(close)} closest of {len(valid):,} valid names)")
        super().__init__(message)
        self.kind, self.name, self.valid, self.close = kind, name, valid, close

    def __str__(self) -> str:
        return str(self.args[0])


def closest_names(name: str, valid: Iterable[str], n: int) -> list[str]:
    """The ``n`` names of ``valid`` most similar to ``name``, best first.

    Names that start with ``name`` come first, then names that contain it; each group is ordered
    by edit distance (:func:`typo_distance`, a swap of two neighbours counting as one edit), then
    names made of the same letters (a transposed typo: ``mps`` -> ``msp`` before ``mos``), then
    difflib's similarity ratio (``2 * matches / total length``), then by name; case-insensitive.
    """
    query = name.lower()

    def rank(candidate: str) -> tuple[bool, bool, int, bool, float, str]:
        low = candidate.lower()
        ratio = difflib.SequenceMatcher(None, query, low).ratio()
        return (not low.startswith(query), query not in low, typo_distance(query, low),
                sorted(low) != sorted(query), -ratio, candidate)

    return sorted(valid, key=rank)[:n]


def typo_distance(a: str, b: str) -> int:
    """Optimal-string-alignment distance: insertions, deletions, substitutions and swaps of two
    adjacent characters, each one edit (Damerau's typo model, without re-editing a swapped pair).
    """
    previous2: list[int] = []
    previous = list(range(len(b) + 1))
    for i, char_a in enumerate(a, start=1):
        current = [i] + [0] * len(b)
        for j, char_b in enumerate(b, start=1):
            current[j] = min(previous[j] + 1, current[j - 1] + 1,
                             previous[j - 1] + (char_a != char_b))
            if i > 1 and j > 1 and char_a == b[j - 2] and a[i - 2] == char_b:
                current[j] = min(current[j], previous2[j - 2] + 1)
        previous2, previous = previous, current
    return previous[-1]


class DataError(OodbenchError):
    """A dataset on disk is missing, incomplete or laid out differently from what was expected."""


class MissingDataError(DataError, FileNotFoundError):
    """A file or folder that a source or dataset needs does not exist."""


class CorruptImageError(DataError):
    """An image file cannot be read or decoded (truncated, corrupt, not an image)."""


class CacheError(OodbenchError):
    """The activation cache is inconsistent (a shard is missing or does not match its checksum)."""


class NotWritableError(OodbenchError, PermissionError):
    """A folder oodbench must write to (results, report) is read-only, full or not a folder."""


class MissingDependencyError(OodbenchError, ImportError):
    """An optional package is needed for this feature; the message says which extra to install."""


class Interrupted(KeyboardInterrupt):
    """Ctrl-C (SIGINT) stopped a long run. Not a failure: the message says what was kept and how
    to resume; ``oodbench`` prints it as one line and exits with status 130 (128 + SIGINT)."""
