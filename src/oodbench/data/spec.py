"""The sources of a configuration file: ``{ folder = "dir" }``, ``{ list = "file.txt" }``,
``{ digits = [...] }`` or ``{ demo = "id_test" }``, as data (``oodbench.run.build`` makes the
:class:`~oodbench.data.Source`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import Field, PrivateAttr, StrictInt, StrictStr, field_validator, model_validator

from oodbench.data.demo import SOURCES as DEMO_SOURCES
from oodbench.errors import MissingDataError, UnknownNameError
from oodbench.schema import ConfigPath, Schema

#: the layouts a source entry may take (exactly one key of these)
LAYOUTS = ("folder", "list", "digits", "demo")


class SourceSpec(Schema):
    """Where images come from: an image folder, an OpenOOD image list, digits or demo sets.

    TOML: ``{ folder = "dir" }`` (``dir/<class>/<image>``; or images in ``dir`` or ``dir/images``
    with ``dir/labels.txt``; or ImageNet validation images with their labels: see
    :func:`oodbench.data.open_folder`), ``{ list = "file.txt", root = "dir" }`` (``relative/path
    label`` lines; label -1 = OOD; ``root`` defaults to the list's folder), ``{ digits = [0, 1,
    2] }`` (sklearn's digits), or ``{ demo = "id_test", seed = 0 }`` (a set of
    :mod:`oodbench.data.demo`).

    Labels that index the model's classes: class folders named by the model's classes (ImageNet
    wnids or class names) are mapped onto them by ``extract``; otherwise a folder or list takes
    ``class_names = ["n01440764", ...]`` (or a text file, one name per line: the label order,
    label ``i`` is ``class_names[i]``, also mapped onto the model's classes by name), and a
    folder takes ``label_map = { my_cats = 281, my_dogs = 207 }`` (folder -> model class index).
    """

    shorthand = "folder"

    folder: ConfigPath | None = None
    list_file: ConfigPath | None = Field(None, alias="list")
    root: ConfigPath | None = None
    digits: tuple[StrictInt, ...] | None = None
    demo: StrictStr | None = None
    seed: StrictInt | None = None
    class_names: tuple[StrictStr, ...] | ConfigPath | None = Field(
        None, description="the label order: an array of class names or a file of one per line")
    label_map: dict[StrictStr, StrictInt] | None = Field(
        None, description="class folder -> model class index")

    _where: str = PrivateAttr(default="")

    @field_validator("class_names", mode="before")
    @classmethod
    def _names_or_file(cls, value: Any) -> Any:
        if value is None or isinstance(value, (str, Path)):
            return value
        if isinstance(value, (list, tuple)) and value and all(isinstance(v, str) for v in value):
            return tuple(value)
        raise ValueError(
            f"expected an array of class names or the path of a file of them, got {value!r}")

    @model_validator(mode="after")
    def _one_layout(self) -> SourceSpec:
        given = [k for k in LAYOUTS if self._raw(k) is not None]
        if len(given) != 1:
            raise ValueError(
                "give exactly one of folder = \"dir\", list = \"file.txt\" (with root = \"dir\"), "
                "digits = [classes] or demo = \"id_test\""
            )
        if self.seed is not None and self.layout != "demo":
            raise ValueError("seed only goes with demo = \"...\"")
        if self.root is not None and self.layout != "list":
            raise ValueError("root only goes with list = \"file.txt\"")
        if self.class_names is not None and self.layout not in ("folder", "list"):
            raise ValueError("class_names only goes with folder = \"dir\" or list = \"file.txt\"")
        if self.label_map is not None:
            if self.layout != "folder" or self.class_names is not None:
                raise ValueError("label_map goes with folder = \"dir\" and without class_names")
            negative = {k: v for k, v in self.label_map.items() if v < 0}
            if negative:
                raise ValueError(f"label_map: model class indices are >= 0; got {negative}")
        if self.digits is not None and not all(0 <= c <= 9 for c in self.digits):
            raise ValueError(f"digits: expected digit classes in 0-9, got {list(self.digits)}")
        if self.demo is not None and self.demo not in DEMO_SOURCES:
            raise ValueError(str(UnknownNameError("demo source", self.demo, DEMO_SOURCES)))
        return self

    def _raw(self, key: str) -> Any:
        return self.list_file if key == "list" else getattr(self, key)

    @property
    def layout(self) -> str:
        """``folder``, ``list``, ``digits`` or ``demo``."""
        return next(k for k in LAYOUTS if self._raw(k) is not None)

    @property
    def path(self) -> Path | None:
        """The folder or the image-list file (``None`` for digits and demo sets)."""
        return self.folder if self.folder is not None else self.list_file

    @property
    def list_root(self) -> Path | None:
        """The folder an image list's paths are relative to (default: the list's folder)."""
        if self.list_file is None:
            return None
        return self.root if self.root is not None else self.list_file.parent

    @property
    def where(self) -> str:
        """``file: [section].key`` of this source in its experiment (for error messages)."""
        return self._where

    def locate(self, where: str) -> SourceSpec:
        """Record where this source stands in its file (``Experiment`` does it on parsing)."""
        self._where = where
        return self

    def label_order(self) -> list[str] | None:
        """``class_names`` as a list (read from its file when it is one), or ``None``."""
        if self.class_names is None or isinstance(self.class_names, tuple):
            return None if self.class_names is None else list(self.class_names)
        lines = self.class_names.read_text(encoding="utf-8").splitlines()
        return [line.strip() for line in lines if line.strip()]

    def check_exists(self) -> None:
        """Raise ``MissingDataError`` saying what was expected where a path is missing."""
        if self.folder is not None and not self.folder.is_dir():
            raise MissingDataError(
                f"{self.where}: folder {self.folder} does not exist; expected an image folder laid "
                "out as <folder>/<class name>/<image> (fix the path in that file)"
            )
        if isinstance(self.class_names, Path) and not self.class_names.is_file():
            raise MissingDataError(
                f"{self.where}: class_names file {self.class_names} does not exist; expected a "
                "text file with one class name per line (line i names label i)"
            )
        if self.list_file is not None:
            if not self.list_file.is_file():
                raise MissingDataError(
                    f"{self.where}: image list {self.list_file} does not exist; expected a text "
                    "file of 'relative/path label' lines (OpenOOD's benchmark_imglist format)"
                )
            root = self.list_root
            if root is not None and not root.is_dir():
                raise MissingDataError(
                    f"{self.where}: root folder {root} does not exist; expected the folder "
                    "that the image list's relative paths start from"
                )

    def describe(self) -> dict[str, Any]:
        """A JSON-able description (part of cell keys and of the report's configuration)."""
        out: dict[str, Any] = {"kind": self.layout}
        if self.path is not None:
            out["path"] = str(self.path)
        if self.list_root is not None:
            out["root"] = str(self.list_root)
        if self.digits is not None:
            out["classes"] = list(self.digits)
        if self.demo is not None:
            out.update(demo=self.demo, seed=self.seed or 0)
        if self.class_names is not None:
            out["class_names"] = (str(self.class_names) if isinstance(self.class_names, Path)
                                  else list(self.class_names))
        if self.label_map is not None:
            out["label_map"] = dict(self.label_map)
        return out


class OodSourceSpec(SourceSpec):
    """Images that are OOD, whose labels do not matter: a ``folder`` is every image below it,
    flat or in sub-folders (:class:`oodbench.data.OodFolder`, label -1); lists, digits and demo
    sets as for any source."""

    def check_exists(self) -> None:
        if self.folder is not None and not self.folder.is_dir():
            raise MissingDataError(
                f"{self.where}: folder {self.folder} does not exist; expected a folder of OOD "
                "images (flat, or in sub-folders) (fix the path in that file)"
            )
        super().check_exists()
