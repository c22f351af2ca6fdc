"""The files shipped inside the package, found with importlib.resources (never relative to the
source tree, so an installed wheel finds them as a checkout does).

  compiler/templates/<set>/   Jinja2 templates and verbatim files: ci, host, image, k8s, starter, triton
  compiler/*/data/*.json      data files (catalog/data, actions/data, capacity/data, runtimes/data)

Templates are read with jinja2.FileSystemLoader and hashed file by file (action keys carry their
digests), so a template set is handed out as a directory on disk: pip installs a wheel unpacked,
and a zipped install is refused with a clear error rather than half-working.
"""

from __future__ import annotations

from importlib.resources import files
from importlib.resources.abc import Traversable
from pathlib import Path

PACKAGE = "compiler"
TEMPLATE_SETS = ("ci", "host", "image", "k8s", "starter", "triton")


class ResourceError(Exception):
    pass


def package_file(*parts: str) -> Traversable:
    """A file or directory inside the package, e.g. package_file("catalog", "data", "gpus.json")."""
    return files(PACKAGE).joinpath(*parts)


def template_dir(name: str) -> Path:
    """The directory of one template set (ci, host, image or triton), as a path on disk."""
    if name not in TEMPLATE_SETS:
        raise ResourceError(f"unknown template set {name!r} (known: {', '.join(TEMPLATE_SETS)})")
    found = package_file("templates", name)
    if not isinstance(found, Path):
        raise ResourceError(f"the {name} templates are inside an archive ({found}); install Kiln unpacked")
    return found


def read_data(*parts: str) -> str:
    """The text (UTF-8) of a data file in the package, e.g. read_data("actions", "data", "trtllm_cli.json")."""
    found = package_file(*parts)
    if not found.is_file():
        raise ResourceError(f"{'/'.join(parts)} is missing from the installed package")
    return found.read_text(encoding="utf-8")
