"""Real services the tests talk to, started on 127.0.0.1 with ports of their own.

`scripts/services.sh` installs the Debian packages (docker.io, docker-registry) and starts dockerd;
a registry is started per test session here, on a free port, with its storage in a temp directory,
and stopped when the session ends.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterable
from pathlib import Path


def docker_reachable() -> bool:
    if shutil.which("docker") is None:
        return False
    return subprocess.run(["docker", "info"], capture_output=True).returncode == 0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def free_ports(offsets: Iterable[int]) -> int | None:
    """A port P on 127.0.0.1 with P + each offset free (None after 50 tries): for a set of servers
    whose ports a spec derives from one base."""
    offsets = tuple(offsets)
    for _ in range(50):
        base = free_port()
        if base + max(offsets) > 65535:
            continue
        try:
            for off in offsets:
                with socket.socket() as s:
                    s.bind(("127.0.0.1", base + off))
            return base
        except OSError:
            continue
    return None


class Registry:
    """A `docker-registry serve` (Distribution 2.x) on 127.0.0.1, no auth, filesystem storage."""

    def __init__(self, htpasswd: str | None = None) -> None:
        """htpasswd: a "user:bcrypt-hash" line to require basic authentication."""
        self.dir = Path(tempfile.mkdtemp(prefix="kiln-registry-"))
        self.port = free_port()
        self.host = f"127.0.0.1:{self.port}"
        config = self.dir / "config.yml"
        auth = ""
        if htpasswd is not None:
            (self.dir / "htpasswd").write_text(htpasswd + "\n", encoding="utf-8")
            auth = f"auth: {{htpasswd: {{realm: kiln-test, path: {self.dir / 'htpasswd'}}}}}\n"
        config.write_text(
            "version: 0.1\n"
            "log: {level: warn}\n"
            f"storage: {{filesystem: {{rootdirectory: {self.dir / 'data'}}}, delete: {{enabled: true}}}}\n"
            f"http: {{addr: {self.host}}}\n" + auth, encoding="utf-8")
        self.log = open(self.dir / "registry.log", "wb")
        self.proc = subprocess.Popen(["docker-registry", "serve", str(config)], stdout=self.log,
                                     stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 20
        while True:
            try:
                with urllib.request.urlopen(f"http://{self.host}/v2/", timeout=1) as r:
                    if r.status == 200:
                        break
            except urllib.error.HTTPError as e:
                if e.code == 401:  # up, and asking for credentials
                    break
            except OSError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"docker-registry did not start: {(self.dir / 'registry.log').read_text()[-2000:]}")
            time.sleep(0.1)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


def registry_available() -> bool:
    return shutil.which("docker-registry") is not None
