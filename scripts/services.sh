#!/usr/bin/env bash
# Start the real services the tests use, reusing what already runs. Prints the PIDs it started
# (for scripts/test.sh to stop); never stops something it did not start.
#   docker-registry: installed here; tests start their own on a free port (tests/services.py).
#   docker: a Docker Engine already here (a daemon that answers, Docker's docker-ce, moby, a
#           dockerd on PATH) is reused; only where there is none, Debian's docker.io is installed
#           (beside a docker client that is not a package: a static CLI is not an engine). dockerd is
#           started, when no daemon answers, with vfs storage and no iptables/bridge (containers
#           use --network host), so it runs inside a container or CI sandbox.
# Sourcing it defines the functions without running anything (tests/test_services_script.py).
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

# Whether a Debian package is installed (not merely known: a removed one keeps its config files).
installed() {
  [[ $(dpkg-query -W -f='${Status}' "$1" 2>/dev/null) == "install ok installed" ]]
}

# The package that gives this machine a Docker Engine: docker.io, or nothing when one is here.
# An engine is here when a daemon answers (local or DOCKER_HOST), a dockerd is on PATH, or an
# engine package is installed. A client alone is not one: some CI images carry a static docker CLI
# (outside dpkg) and no daemon; docker.io installs beside it, and that client talks to its daemon.
# docker.io conflicts with Docker's own packages (docker-ce, docker-ce-cli: both ship
# /usr/bin/docker), so where one of those is installed apt would remove it: nothing is added, and
# start_docker says what is missing.
docker_packages() {
  if docker info >/dev/null 2>&1 || command -v dockerd >/dev/null 2>&1; then
    return 0
  fi
  local pkg
  for pkg in docker-ce docker-ce-cli moby-engine moby-cli docker.io; do
    if installed "$pkg"; then return 0; fi
  done
  echo docker.io
}

# Start dockerd when no daemon answers; print its PID.
start_docker() {
  docker info >/dev/null 2>&1 && return 0
  if ! command -v dockerd >/dev/null 2>&1; then
    echo "a docker client is installed but no daemon answers, and there is no dockerd here to start:" \
         "start your Docker Engine (e.g. systemctl start docker) and run this again" >&2
    return 1
  fi
  local log
  log=$(mktemp -t kiln-dockerd.XXXXXX.log)
  setsid dockerd --storage-driver=vfs --iptables=false --bridge=none >"$log" 2>&1 < /dev/null &
  echo "$!"
  for _ in $(seq 1 60); do
    docker info >/dev/null 2>&1 && break
    sleep 0.5
  done
  docker info >/dev/null 2>&1 || { echo "dockerd did not start; its log: $log" >&2; tail -20 "$log" >&2; return 1; }
}

main() {
  # python3, python3-venv: Debian's own interpreter, which tests/test_install.py installs Kiln with.
  local packages=(shellcheck docker-registry busybox-static python3 python3-venv) docker
  docker=$(docker_packages)
  if [ -n "$docker" ]; then packages+=("$docker"); fi
  apt_install "${packages[@]}"
  start_docker
}

if [[ ${BASH_SOURCE[0]} == "$0" ]]; then
  main "$@"
fi
