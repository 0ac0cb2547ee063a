"""Where the project's top-level data directories are: ``mappings/``, ``shapes/``, ``schemas/``.

In a source checkout or an editable install they sit next to the ``aggregator`` package. A
built wheel carries them as data files, installed under ``<prefix>/share/ld-aggregator/``
(``[tool.setuptools.data-files]`` in ``pyproject.toml``): ``sysconfig``'s data path for the
running interpreter, which is ``sys.prefix`` for a virtual environment or a system install and
the user base for ``pip install --user``.
"""

from __future__ import annotations

import site
import sys
import sysconfig
from pathlib import Path

from aggregator.core.errors import ConfigError

SHARE = Path("share") / "ld-aggregator"
_CHECKOUT = Path(__file__).resolve().parents[2]


def candidates(name: str) -> list[Path]:
    """Every place ``name`` (``"mappings"``, ``"shapes"``...) may be, most specific first."""
    prefixes = [Path(sysconfig.get_path("data")), Path(sys.prefix), Path(sys.base_prefix)]
    if site.ENABLE_USER_SITE and site.USER_BASE:
        prefixes.append(Path(site.USER_BASE))
    found = [_CHECKOUT / name]
    for prefix in prefixes:
        path = prefix / SHARE / name
        if path not in found:
            found.append(path)
    return found


def _holding(name: str, filename: str) -> Path | None:
    return next((p for p in candidates(name) if (p / filename).is_file()), None)


def data_dir(name: str, marker: str) -> Path:
    """The first candidate directory for ``name`` that holds the file ``marker``."""
    found = _holding(name, marker)
    if found is None:
        where = ", ".join(str(p) for p in candidates(name))
        raise ConfigError(f"cannot find the bundled {name}/{marker}; looked in {where}")
    return found


def bundled(name: str, filename: str) -> Path:
    """A bundled file, e.g. ``bundled("mappings", "dcat-ap-3.toml")``: where it is found, else
    where a source checkout would have it (for module-level defaults: reading a missing file
    then fails with its path)."""
    return (_holding(name, filename) or _CHECKOUT / name) / filename
