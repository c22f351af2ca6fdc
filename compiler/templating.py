"""The Jinja2 environment Kiln renders its template sets with (image, host, triton).

Strict for every set: an undefined name is an error rather than an empty string, nothing is
HTML-escaped (the outputs are shell, Dockerfiles, protobuf text), and a template's last newline is
kept, so that a rendered file is what the template says to the byte. A set passes what differs:
its `finalize` (what a printed value must be), its filters and its syntax options. jinja2 is
imported only when an environment is built: validate and plan never render.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:
    from jinja2 import Environment


def strict_environment(template_dir: Path, finalize: Callable[[object], object],
                       filters: dict[str, Callable], **syntax: object) -> Environment:
    from jinja2 import Environment, FileSystemLoader, StrictUndefined

    env = Environment(loader=FileSystemLoader(str(template_dir)), undefined=StrictUndefined,
                      keep_trailing_newline=True, autoescape=False, finalize=finalize, **syntax)
    env.filters.update(filters)
    return env


def only_quoted(quoted: tuple[type, ...], templates: str, pipes: str) -> Callable[[object], object]:
    """A `finalize` that prints only values already quoted (instances of `quoted`) and refuses any
    other, naming the filters that quote it: in a script, a name must never become syntax."""

    def finalize(value: object) -> object:
        if isinstance(value, quoted):
            return value
        from jinja2 import TemplateError

        raise TemplateError(f"unquoted value {value!r} in {templates}: pipe it through {pipes}")

    return finalize
