"""Image sources: ordered, labelled image collections with a stable fingerprint (see DESIGN.md).

``ImageFolder`` (``root/<class>/<image>``), ``OodFolder`` (every image below a folder,
unlabelled: an OOD set), ``ImageList`` (OpenOOD's ``path label`` files),
``ImageNetVal`` (the ILSVRC2012 validation layouts), ``ArraySource`` (in-memory arrays) and
``DigitsSource`` (scikit-learn's bundled digits) all
implement :class:`Source`; ``load(i)`` returns an RGB PIL image or raises
:class:`oodbench.errors.CorruptImageError`. ``open_folder(path)`` picks the right one for a
folder (ImageNet validation images, images + ``labels.txt``, or class folders).
"""

from oodbench.data.arrays import ArraySource
from oodbench.data.digits import DigitsSource
from oodbench.data.folder import ImageFolder, OodFolder, open_folder
from oodbench.data.image_list import ImageList
from oodbench.data.imagenet_val import ImageNetVal
from oodbench.data.source import Source, SubsetSource

__all__ = [
    "ArraySource",
    "DigitsSource",
    "ImageFolder",
    "ImageList",
    "ImageNetVal",
    "OodFolder",
    "Source",
    "SubsetSource",
    "open_folder",
]
