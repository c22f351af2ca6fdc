"""Secrets out of messages, and registry text safe for a terminal.

Every message about a registry passes through `redact`: user:password@ in references and URLs is
masked, and so is every secret Kiln knows of (the password variable, read each time; passwords of
references parsed in this process; Basic header values and tokens a client sent), in each of the
forms escaping gives it, since a registry may echo what it was sent. `printable` escapes control
characters in text a registry wrote, so an answer cannot retitle, clear or forge lines of a terminal.
"""

from __future__ import annotations

import json
import os
import re
import urllib.parse

# user:password@ opening a reference or following a URL's '//' (a user name alone is not a secret;
# an image reference's name:tag@sha256:... is not a credential)
_USERINFO_RE = re.compile(r"(?:(?<=//)|(?<![^\s'\"(=,]))[^\s/@'\"<>]+:[^\s/@'\"<>]*@(?!sha\d+:)")
SECRET_ENV = ("KILN_REGISTRY_PASSWORD",)
_secrets: set[str] = set()  # secrets met in this process (see remember_secret)
_MIN_SECRET = 3  # a shorter value would mask ordinary words; references never print one anyway


def _secret_forms(secret: str) -> set[str]:
    """The ways a secret can appear in text: as is, escaped by repr or JSON, URL-encoded."""
    forms = {secret, repr(secret)[1:-1], json.dumps(secret)[1:-1], json.dumps(secret, ensure_ascii=False)[1:-1],
             urllib.parse.quote(secret, safe=""), urllib.parse.quote(secret), urllib.parse.quote_plus(secret)}
    return {f for f in forms if len(f) >= _MIN_SECRET}


def remember_secret(secret: str | None) -> None:
    """Mask `secret` in every message from now on (a password, a Basic header's value, a token)."""
    if secret:
        _secrets.add(secret)


def redact(text: str) -> str:
    """`text` with registry credentials masked: user:password@ in references and URLs, and every
    secret Kiln knows (the password variable's value, and what `remember_secret` was given), in any
    of the forms escaping gives it, wherever it appears (a registry may echo it in an error body)."""
    secrets = set(_secrets)
    for name in SECRET_ENV:
        if os.environ.get(name):
            secrets.add(os.environ[name])
    forms = sorted({f for s in secrets for f in _secret_forms(s)}, key=len, reverse=True)
    for form in forms:
        text = text.replace(form, "***")
    return _USERINFO_RE.sub("***@", text)


def printable(text: str, limit: int = 300) -> str:
    """Text a registry wrote, safe for a terminal: control characters escaped, at most `limit`."""
    out = "".join(c if c.isprintable() else repr(c)[1:-1] for c in text[:limit])
    return out + ("..." if len(text) > limit else "")
