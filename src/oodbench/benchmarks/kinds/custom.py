"""``type = "custom"``: the experiment's ID test set against OOD groups the user names."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import Field, StrictStr, field_validator

from oodbench.benchmarks.kinds import (
    GROUP_KINDS,
    BenchmarkEntry,
    BenchmarkKind,
    KindInputs,
    register,
)
from oodbench.data.spec import OodSourceSpec, SourceSpec
from oodbench.schema import one_of

if TYPE_CHECKING:
    from oodbench.benchmarks.base import Benchmark


class GroupSpec(OodSourceSpec):
    """One OOD group of a custom benchmark: its images and whether it is near or far OOD."""

    kind: Annotated[StrictStr, one_of(GROUP_KINDS)] = "far"

    @property
    def source(self) -> SourceSpec:
        return self


class CustomSpec(BenchmarkEntry):
    """The experiment's ID test set against OOD groups the user names (``name -> images``)."""

    type: Literal["custom"] = "custom"
    name: StrictStr = "custom"
    groups: dict[str, GroupSpec] = Field(
        description="OOD groups: name = { folder = \"dir\", kind = \"far\" }"
    )

    @field_validator("groups")
    @classmethod
    def _some(cls, groups: dict[str, GroupSpec]) -> dict[str, GroupSpec]:
        if not groups:
            raise ValueError("add at least one OOD group: name = { folder = \"dir\", kind = \"far\" }")
        return groups

    def sources(self, where: str) -> Iterator[tuple[str, SourceSpec]]:
        for group, spec in self.groups.items():
            yield f"{where}.groups.{group}", spec

    def describe(self) -> dict[str, Any]:
        return {"type": self.type, "name": self.name,
                "groups": {g: {**s.describe(), "kind": s.kind} for g, s in self.groups.items()},
                **self.intervals()}


@register
class CustomKind(BenchmarkKind):
    """The ID test set against named near / far OOD folders."""

    name = "custom"
    entry = CustomSpec
    needs = frozenset({"id_test"})

    @classmethod
    def build(cls, entry: CustomSpec, inputs: KindInputs) -> Benchmark:
        from oodbench.benchmarks.standard import OodSetsBenchmark

        ood = {g: inputs.source(spec) for g, spec in entry.groups.items()}
        kinds = {g: spec.kind for g, spec in entry.groups.items()}
        assert inputs.id_test is not None
        return OodSetsBenchmark(inputs.id_test, ood, kinds=kinds, name=entry.name)
