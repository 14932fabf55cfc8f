"""``type = "cood"``: the C-OOD severity benchmark (Galil et al., ICLR 2023) on an OOD class pool."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field, StrictFloat, StrictInt, StrictStr, field_validator

from oodbench.benchmarks.kinds import BenchmarkEntry, BenchmarkKind, KindInputs, register
from oodbench.data.spec import SourceSpec

if TYPE_CHECKING:
    from oodbench.benchmarks.base import Benchmark

COOD_DESCRIPTION = (
    "C-OOD severity benchmark (Galil, Dabbah & El-Yaniv, ICLR 2023): OOD classes from "
    "ImageNet-21k graded into severity levels per model and detector; build with "
    "get('cood', id_test=..., ood_pool=...)"
)

_COOD_OPTIONS = ("window", "n_levels", "estimation_fraction", "images_per_class", "seed",
                 "selection", "id_classes")


class CoodSpec(BenchmarkEntry):
    """The C-OOD severity benchmark (Galil et al., ICLR 2023) on an OOD class pool.

    Options mirror :class:`oodbench.benchmarks.cood.CoodBenchmark`; ``window`` defaults to the
    number of ID classes and ``n_levels`` to the paper's 11.
    """

    type: Literal["cood"] = "cood"
    name: StrictStr = "cood"
    pool: SourceSpec = Field(
        description="the OOD class pool: a labelled folder or image list of classes the model "
        "never saw"
    )
    window: StrictInt | None = None
    n_levels: StrictInt | None = None
    estimation_fraction: StrictFloat | None = None
    images_per_class: StrictInt | None = None
    seed: StrictInt | None = None
    selection: StrictStr | None = None
    id_classes: tuple[StrictInt, ...] | None = None

    @field_validator("estimation_fraction")
    @classmethod
    def _fraction(cls, value: float | None) -> float | None:
        if value is not None and not 0 < value < 1:
            raise ValueError(f"must lie in (0, 1), got {value}")
        return value

    @field_validator("selection")
    @classmethod
    def _selection(cls, value: str | None) -> str | None:
        if value is not None and value not in ("percentiles", "disjoint"):
            raise ValueError("use \"percentiles\" (the paper) or \"disjoint\"")
        return value

    @field_validator("id_classes", mode="before")
    @classmethod
    def _id_classes(cls, value: Any) -> Any:
        if value is not None and not (
            isinstance(value, list) and all(isinstance(c, int) and not isinstance(c, bool) for c in value)
        ):
            raise ValueError("expected an array of model class indices")
        return value

    @property
    def options(self) -> dict[str, Any]:
        """The options given in the file (keyword arguments of ``CoodBenchmark``)."""
        out = {k: getattr(self, k) for k in _COOD_OPTIONS if getattr(self, k) is not None}
        if "id_classes" in out:
            out["id_classes"] = list(out["id_classes"])
        return out

    def sources(self, where: str) -> Iterator[tuple[str, SourceSpec]]:
        yield f"{where}.pool", self.pool

    def describe(self) -> dict[str, Any]:
        return {"type": self.type, "name": self.name, "pool": self.pool.describe(),
                "options": self.options, **self.intervals()}


@register
class CoodKind(BenchmarkKind):
    """The C-OOD severity levels of the pool, graded per model and detector."""

    name = "cood"
    entry = CoodSpec
    needs = frozenset({"id_test"})
    table_hint = " with a pool = {...}"

    @classmethod
    def named(cls) -> dict[str, str]:
        return {"cood": COOD_DESCRIPTION}

    @classmethod
    def get(cls, name: str, **options: Any) -> Benchmark:
        """``get("cood", id_test=..., ood_pool=..., ...)``: the options of
        :class:`~oodbench.benchmarks.cood.CoodBenchmark`."""
        from oodbench.benchmarks.cood import CoodBenchmark

        return CoodBenchmark(**options)

    @classmethod
    def build(cls, entry: CoodSpec, inputs: KindInputs) -> Benchmark:
        from oodbench.benchmarks.cood import CoodBenchmark

        assert inputs.id_test is not None  # (needs id_test)
        bench = CoodBenchmark(inputs.id_test, inputs.source(entry.pool), **entry.options)
        bench.name = entry.name
        return bench
