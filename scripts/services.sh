#!/usr/bin/env bash
# Start the real services the tests use, reusing what already runs. Prints the PIDs it started
# (for scripts/test.sh to stop); never stops something it did not start.
#   docker-registry: installed here; tests start their own on a free port (tests/services.py).
#   docker: Debian's docker.io, dockerd with vfs storage and no iptables/bridge (containers use
#           --network host), so it runs inside a container or CI sandbox.
set -euo pipefail

apt_install() {
  local missing=()
  for pkg in "$@"; do dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg"); done
  [ ${#missing[@]} -eq 0 ] && return 0
  # One apt at a time: scripts/test.sh runs this next to scripts/install.sh, which may install
  # python3-venv (the lock file is shared with it).
  (
    flock 9
    apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >&2
  ) 9>"${TMPDIR:-/tmp}/kiln-apt.lock"
}

# python3, python3-venv: Debian's own interpreter, which tests/test_install.py installs Kiln with.
apt_install shellcheck docker.io docker-registry busybox-static python3 python3-venv

if ! docker info >/dev/null 2>&1; then
  log=$(mktemp -t kiln-dockerd.XXXXXX.log)
  setsid dockerd --storage-driver=vfs --iptables=false --bridge=none >"$log" 2>&1 < /dev/null &
  echo "$!"
  for _ in $(seq 1 60); do
    docker info >/dev/null 2>&1 && break
    sleep 0.5
  done
  docker info >/dev/null 2>&1 || { echo "dockerd did not start; its log: $log" >&2; tail -20 "$log" >&2; exit 1; }
fi
