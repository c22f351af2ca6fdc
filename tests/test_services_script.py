"""scripts/services.sh installs Debian's docker.io only where no Docker Engine is here: docker.io
conflicts with Docker's docker-ce (both ship /usr/bin/docker), so a developer's engine is reused; a
docker client alone (a static CLI outside dpkg, as some CI images carry) is not an engine.

The decision runs in the real script (sourced, which runs nothing) under a PATH of stand-ins for
what a machine may have: dpkg-query's answers, a docker or dockerd binary. Nothing is installed.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SERVICES = ROOT / "scripts" / "services.sh"
BASH = shutil.which("bash") or "/bin/bash"

# dpkg-query -W -f='${Status}' PKG, as Debian answers for an installed, a removed (config files
# kept) and an unknown package; the states come from the environment of the test.
DPKG_QUERY = """#!{bash}
pkg="${{!#}}"
case " $KILN_TEST_INSTALLED " in *" $pkg "*) printf 'install ok installed'; exit 0;; esac
case " $KILN_TEST_REMOVED " in *" $pkg "*) printf 'deinstall ok config-files'; exit 0;; esac
echo "dpkg-query: no packages found matching $pkg" >&2
exit 1
"""


def _machine(tmp_path: Path, binaries: tuple[str, ...] = ()) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "dpkg-query").write_text(DPKG_QUERY.format(bash=BASH), encoding="utf-8")
    for name in binaries:  # a docker CLI or daemon from anywhere: docker-ce, a static binary, moby
        name, _, state = name.partition(":")
        # "docker:no-daemon": a client whose `docker info` finds no daemon
        (bin_dir / name).write_text(f"#!{BASH}\nexit {1 if state == 'no-daemon' else 0}\n", encoding="utf-8")
    for p in bin_dir.iterdir():
        p.chmod(0o755)
    return bin_dir


def _run(bin_dir: Path, script: str, installed: str = "", removed: str = "") -> subprocess.CompletedProcess:
    env = {"PATH": str(bin_dir), "KILN_TEST_INSTALLED": installed, "KILN_TEST_REMOVED": removed}
    return subprocess.run([BASH, "-c", f'source "{SERVICES}"; {script}'], env=env, capture_output=True,
                          text=True, timeout=30)


@pytest.mark.parametrize("binaries, installed, removed, want", [
    ((), "", "", "docker.io"),  # a fresh machine
    ((), "", "docker-ce docker.io", "docker.io"),  # removed packages left config files only
    (("docker",), "", "", ""),  # a client whose daemon answers (local, or DOCKER_HOST)
    (("docker:no-daemon",), "", "", "docker.io"),  # a static client and no engine: added beside it
    (("docker:no-daemon", "dockerd"), "", "", ""),  # any daemon binary
    (("dockerd",), "", "", ""),
    ((), "docker-ce", "", ""),  # Docker's own packages, whatever PATH says
    (("docker:no-daemon",), "docker-ce-cli", "", ""),  # apt would remove it: start_docker says so
    ((), "moby-engine", "", ""),
    ((), "docker.io", "", ""),  # already there: nothing to add
])
def test_docker_io_only_where_no_engine_is_installed(tmp_path: Path, binaries, installed, removed, want) -> None:
    proc = _run(_machine(tmp_path, binaries), "docker_packages", installed, removed)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == want


@pytest.mark.parametrize("installed, docker_io", [("", True), ("docker-ce", False)])
def test_main_asks_apt_for_docker_io_only_when_needed(tmp_path: Path, installed: str, docker_io: bool) -> None:
    # apt and the daemon are the machine's own: here they only say what they were asked
    proc = _run(_machine(tmp_path), 'apt_install() { echo "apt: $*"; }; start_docker() { echo started; }; main',
                installed)
    assert proc.returncode == 0, proc.stderr
    apt = next(line for line in proc.stdout.splitlines() if line.startswith("apt: "))
    assert ("docker.io" in apt.split()) is docker_io
    assert {"shellcheck", "docker-registry", "busybox-static"} <= set(apt.split())
    assert proc.stdout.splitlines()[-1] == "started"


def test_a_client_without_a_daemon_is_a_clear_error(tmp_path: Path) -> None:
    bin_dir = _machine(tmp_path, ("docker:no-daemon",))
    proc = _run(bin_dir, "start_docker")
    assert proc.returncode == 1 and "no dockerd here to start" in proc.stderr


def test_sourcing_runs_nothing(tmp_path: Path) -> None:
    proc = _run(_machine(tmp_path), "echo sourced")
    assert proc.returncode == 0 and proc.stdout == "sourced\n" and proc.stderr == ""


@pytest.mark.skipif(shutil.which("shellcheck") is None, reason="shellcheck is installed by scripts/services.sh")
def test_the_scripts_pass_shellcheck() -> None:
    proc = subprocess.run(["shellcheck", str(SERVICES), str(ROOT / "scripts" / "test.sh")], capture_output=True,
                          text=True)
    assert proc.returncode == 0, proc.stdout
