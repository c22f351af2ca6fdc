"""A small client for the OCI distribution API (blobs, manifests, tags), on the standard library.

Enough for ORAS-style artifacts: monolithic blob uploads, manifests by tag or digest, and the
token handshake registries use (anonymous or with $KILN_REGISTRY_USERNAME/$KILN_REGISTRY_PASSWORD).
Loopback registries are spoken to over plain HTTP (as Docker does), everything else over HTTPS
unless $KILN_REGISTRY_PLAIN_HTTP=1.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
TIMEOUT_S = 60
_LOOPBACK = ("127.0.0.1", "localhost", "[::1]")
_REPO_RE = re.compile(r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*")


class RegistryError(Exception):
    """The registry refused a request or could not be reached (one line, no traceback)."""


class Unreachable(RegistryError):
    """No answer from the registry at all (connection refused, no route, timeout)."""


@dataclass(frozen=True)
class Registry:
    host: str  # "127.0.0.1:5000", "ghcr.io"
    namespace: str  # "" or "team/inference"
    scheme: str = "https"

    @staticmethod
    def parse(target: str) -> "Registry":
        """'host[:port][/namespace]' as in the spec's publish.registry."""
        text = target.strip().removeprefix("oci://").rstrip("/")
        host, _, namespace = text.partition("/")
        if not host or (namespace and not _REPO_RE.fullmatch(namespace)):
            raise RegistryError(f"not a registry reference: {target!r} (expected host[:port][/namespace])")
        plain = os.environ.get("KILN_REGISTRY_PLAIN_HTTP") == "1" or host.rsplit(":", 1)[0] in _LOOPBACK \
            or host.startswith("[::1]")
        return Registry(host, namespace, "http" if plain else "https")

    def repo(self, name: str) -> str:
        return f"{self.namespace}/{name}" if self.namespace else name

    def __str__(self) -> str:
        return f"{self.host}/{self.namespace}" if self.namespace else self.host


class Client:
    def __init__(self, registry: Registry) -> None:
        self.registry = registry
        self._tokens: dict[str, str] = {}  # repository -> bearer token

    # --- transport -------------------------------------------------------------------------------
    def _url(self, repo: str, tail: str) -> str:
        return f"{self.registry.scheme}://{self.registry.host}/v2/{repo}/{tail}"

    def _open(self, method: str, url: str, repo: str, body=None, headers: dict | None = None,
              ok: tuple[int, ...] = (200,)):
        """The response for a request (retried once with credentials after a 401); None on a 404."""
        for attempt in (0, 1):
            h = dict(headers or {})
            if repo in self._tokens:
                h["Authorization"] = self._tokens[repo]
            if hasattr(body, "seek"):
                body.seek(0)
            req = urllib.request.Request(url, data=body, method=method, headers=h)
            try:
                resp = urllib.request.urlopen(req, timeout=TIMEOUT_S)
            except urllib.error.HTTPError as e:
                if e.code == 401 and attempt == 0:
                    self._authenticate(repo, e.headers.get("WWW-Authenticate", ""))
                    continue
                if e.code == 401:
                    raise RegistryError(f"{self.registry.host} rejected the credentials (KILN_REGISTRY_USERNAME, "
                                        "KILN_REGISTRY_PASSWORD)") from None
                if e.code == 404 and 404 not in ok:
                    return None
                detail = e.read(2000).decode("utf-8", "replace").strip()
                raise RegistryError(f"{method} {url}: HTTP {e.code} {_error_text(detail)}") from None
            except (urllib.error.URLError, OSError) as e:
                reason = getattr(e, "reason", e)
                raise Unreachable(f"cannot reach {self.registry.host}: {reason}") from None
            if resp.status not in ok:
                raise RegistryError(f"{method} {url}: unexpected HTTP {resp.status}")
            return resp
        raise RegistryError(f"{method} {url}: not authorized")  # not reached: the loop returns or raises

    def _authenticate(self, repo: str, challenge: str) -> None:
        user, password = os.environ.get("KILN_REGISTRY_USERNAME"), os.environ.get("KILN_REGISTRY_PASSWORD")
        basic = None
        if user and password:
            basic = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
        scheme, _, rest = challenge.partition(" ")
        if scheme.lower() == "basic":
            if basic is None:
                raise RegistryError(f"{self.registry.host} needs credentials: set KILN_REGISTRY_USERNAME "
                                    "and KILN_REGISTRY_PASSWORD")
            self._tokens[repo] = basic
            return
        if scheme.lower() != "bearer":
            raise RegistryError(f"{self.registry.host}: unsupported authentication {challenge!r}")
        fields = dict(re.findall(r'(\w+)="([^"]*)"', rest))
        query = {"service": fields.get("service", ""), "scope": f"repository:{repo}:pull,push"}
        req = urllib.request.Request(fields.get("realm", "") + "?" + urllib.parse.urlencode(query),
                                     headers={"Authorization": basic} if basic else {})
        try:
            with urllib.request.urlopen(req, timeout=TIMEOUT_S) as resp:
                doc = json.loads(resp.read())
        except (urllib.error.URLError, OSError, ValueError) as e:
            raise RegistryError(f"{self.registry.host}: token request failed: {e}") from None
        token = doc.get("token") or doc.get("access_token")
        if not token:
            raise RegistryError(f"{self.registry.host}: the token service returned no token")
        self._tokens[repo] = f"Bearer {token}"

    # --- blobs -----------------------------------------------------------------------------------
    def has_blob(self, repo: str, digest: str) -> bool:
        resp = self._open("HEAD", self._url(repo, f"blobs/{digest}"), repo)
        if resp is None:
            return False
        resp.close()
        return True

    def push_blob(self, repo: str, digest: str, size: int, source: bytes | Path) -> bool:
        """Upload a blob unless the repository has it; True when it was uploaded."""
        if self.has_blob(repo, digest):
            return False
        resp = self._open("POST", self._url(repo, "blobs/uploads/"), repo, body=b"", ok=(202,))
        location = resp.headers["Location"]
        resp.close()
        url = urllib.parse.urljoin(self._url(repo, "blobs/uploads/"), location)
        url += ("&" if "?" in url else "?") + urllib.parse.urlencode({"digest": digest})
        headers = {"Content-Type": "application/octet-stream", "Content-Length": str(size)}
        if isinstance(source, Path):
            with open(source, "rb") as f:
                self._open("PUT", url, repo, body=f, headers=headers, ok=(201,)).close()
        else:
            self._open("PUT", url, repo, body=source, headers=headers, ok=(201,)).close()
        return True

    def fetch_blob(self, repo: str, digest: str, dest: BinaryIO) -> None:
        """Stream a blob into `dest`, verifying its digest."""
        resp = self._open("GET", self._url(repo, f"blobs/{digest}"), repo)
        if resp is None:
            raise RegistryError(f"{repo}: blob {digest} is missing")
        h = hashlib.sha256()
        with resp:
            while chunk := resp.read(1 << 20):
                h.update(chunk)
                dest.write(chunk)
        if "sha256:" + h.hexdigest() != digest:
            raise RegistryError(f"{repo}: blob {digest} does not match its digest")

    def read_blob(self, repo: str, digest: str) -> bytes:
        import io

        buf = io.BytesIO()
        self.fetch_blob(repo, digest, buf)
        return buf.getvalue()

    # --- manifests -------------------------------------------------------------------------------
    def put_manifest(self, repo: str, ref: str, body: bytes, media_type: str = OCI_MANIFEST) -> str:
        resp = self._open("PUT", self._url(repo, f"manifests/{ref}"), repo, body=body,
                          headers={"Content-Type": media_type}, ok=(201,))
        resp.close()
        return "sha256:" + hashlib.sha256(body).hexdigest()

    def manifest_digest(self, repo: str, ref: str) -> str | None:
        resp = self._open("HEAD", self._url(repo, f"manifests/{ref}"), repo, headers={"Accept": OCI_MANIFEST})
        if resp is None:
            return None
        resp.close()
        return resp.headers.get("Docker-Content-Digest")

    def get_manifest(self, repo: str, ref: str) -> tuple[bytes, str] | None:
        """(bytes, digest) of a manifest, verified when fetched by digest; None when absent."""
        resp = self._open("GET", self._url(repo, f"manifests/{ref}"), repo, headers={"Accept": OCI_MANIFEST})
        if resp is None:
            return None
        with resp:
            body = resp.read()
        digest = "sha256:" + hashlib.sha256(body).hexdigest()
        if ref.startswith("sha256:") and digest != ref:
            raise RegistryError(f"{repo}: manifest {ref} does not match its digest")
        return body, digest


def _error_text(detail: str) -> str:
    """The registry's error message from its JSON error body, when it sent one."""
    try:
        errors = json.loads(detail).get("errors") or []
        return "; ".join(f"{e.get('code')}: {e.get('message')}" for e in errors) or detail[:200]
    except (ValueError, AttributeError):
        return detail[:200]
