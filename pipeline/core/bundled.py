"""Where the files rowgate ships beside its code live: the default schemas and rubrics.

In the repository they are the top-level ``schemas/`` and ``rubrics/`` folders (a checkout
and an editable install read them there). A wheel carries the same folders inside the
package, as ``pipeline/_data/<name>`` (the package-dir mapping in pyproject.toml), and the
installed copy is the one read: an installed rowgate never looks outside its package.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

__all__ = ["bundled_dir"]

_PACKAGE: Final = Path(__file__).resolve().parent.parent


def bundled_dir(name: str) -> Path:
    """The directory of the bundled ``name`` folder (``"schemas"``, ``"rubrics"``)."""
    installed = _PACKAGE / "_data" / name
    return installed if installed.is_dir() else _PACKAGE.parent / name
