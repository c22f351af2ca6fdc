#!/usr/bin/env python3
"""A stand-in for the docker CLI, for provision.sh runs where no GPU exists (a real `docker run
--gpus` cannot start a container here). It answers the calls provision.sh makes, keeps its
containers in a JSON state file (KILN_FAKE_DOCKER_STATE), logs every call (KILN_FAKE_DOCKER_LOG,
one JSON argv a line) and refuses what Docker refuses for them: a second container of a name, a
`--gpus` value that is not `all`, a count or `"device=..."` (Docker's CSV parser splits an unquoted
list at its commas: docker/cli opts/gpus.go), `--env` without NAME=VALUE.

A started container is a small HTTP server answering 200 to every GET on the port its health
check probes (`--health-cmd '... --probe PORT ...'`), the way a served model answers its
readiness paths; `rm -f` stops it. With KILN_FAKE_DOCKER_EXEC_ROOT set, a container runs its
command instead: the image's files are that directory (a path under /opt/kiln in the command or
--workdir is read there), its `trtllm-serve` is tests/disagg_standin.py (run by
KILN_FAKE_DOCKER_PYTHON), with the --env values in its environment and its output in
<root>/logs/<name>.log; it is running while its process lives. Containers record the environment they were given (`--env`),
whether they got a GPU, their working directory and IPC/PID namespaces, which the tests read
from the state file.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys

SERVER = ("import http.server, sys\n"
          "class H(http.server.BaseHTTPRequestHandler):\n"
          "    def do_GET(self):\n"
          "        self.send_response(200); self.end_headers(); self.wfile.write(b'ok')\n"
          "    def log_message(self, *a): pass\n"
          "http.server.HTTPServer(('127.0.0.1', int(sys.argv[1])), H).serve_forever()\n")

VALUE_FLAGS = {"--name", "--restart", "--network", "--cpuset-cpus", "--shm-size", "--ulimit", "--health-cmd",
               "--health-interval", "--health-timeout", "--health-retries", "--health-start-period", "--label",
               "--env", "--gpus", "--workdir", "--ipc", "--pid"}
# the namespace modes docker run accepts (Docker run reference: --ipc, --pid)
IPC_MODES = {"none", "private", "shareable", "host"}
PID_MODES = {"host"}


def load(path: str) -> dict:
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError:
        return {}


def save(path: str, state: dict) -> None:
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        json.dump(state, f, indent=1, sort_keys=True)
    os.replace(path + ".tmp", path)


def run(argv: list[str], state: dict) -> int:
    opts: dict[str, list[str]] = {}
    i = 0
    while i < len(argv) and argv[i].startswith("--"):
        if argv[i] in VALUE_FLAGS:
            opts.setdefault(argv[i], []).append(argv[i + 1])
            i += 2
        else:
            opts.setdefault(argv[i], []).append("")
            i += 1
    image, command = argv[i], argv[i + 1:]
    name = opts["--name"][0]
    if name in state:
        print(f'docker: Error response from daemon: Conflict. The container name "/{name}" is already in use.',
              file=sys.stderr)
        return 125
    for env in opts.get("--env", []):
        if "=" not in env:
            print(f"docker: invalid environment {env!r}", file=sys.stderr)
            return 125
    for gpus in opts.get("--gpus", []):
        if not (gpus == "all" or gpus.isdigit() or (gpus.startswith('"device=') and gpus.endswith('"'))
                or ("," not in gpus and gpus.startswith("device="))):
            print(f"docker: invalid --gpus {gpus!r}: a device list needs quotes", file=sys.stderr)
            return 125
    for flag, modes in (("--ipc", IPC_MODES), ("--pid", PID_MODES)):
        for mode in opts.get(flag, []):
            if mode not in modes and not mode.startswith("container:"):
                print(f"docker: invalid {flag} mode {mode!r}", file=sys.stderr)
                return 125
    workdir = opts.get("--workdir", [""])[-1]
    if workdir and not workdir.startswith("/"):
        print(f"docker: the working directory '{workdir}' is invalid, it needs to be an absolute path",
              file=sys.stderr)
        return 125
    health = shlex.split(opts["--health-cmd"][0])
    port = int(health[health.index("--probe") + 1])
    root = os.environ.get("KILN_FAKE_DOCKER_EXEC_ROOT")
    if root:
        proc = execute(root, name, command, workdir, opts.get("--env", []))
        if proc is None:
            return 125
    else:
        proc = subprocess.Popen([sys.executable, "-c", SERVER, str(port)], start_new_session=True,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    labels = dict(label.split("=", 1) for label in opts.get("--label", []))
    state[name] = {"image": image, "command": command, "labels": labels, "pid": proc.pid,
                   "env": sorted(opts.get("--env", [])), "gpus": opts.get("--gpus", []),
                   "workdir": workdir, "ipc_mode": opts.get("--ipc", ["private"])[-1],
                   "pid_mode": opts.get("--pid", ["private"])[-1], "shm_size": opts.get("--shm-size", [""])[-1]}
    print("0" * 64)
    return 0


IMAGE_ROOT = "/opt/kiln"  # compiler/serving/layout.py IMAGE_ROOT: what the image holds
STANDINS = {"trtllm-serve": os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                         "disagg_standin.py")}


def execute(root: str, name: str, command: list[str], workdir: str, env: list[str]):
    """Start a container's command on this machine, the image's files under `root`."""
    def here(path: str) -> str:
        return root + path if path == IMAGE_ROOT or path.startswith(IMAGE_ROOT + "/") else path

    if not command or command[0] not in STANDINS:
        print(f"fake docker: no stand-in for {command[:1]}", file=sys.stderr)
        return None
    argv = [os.environ["KILN_FAKE_DOCKER_PYTHON"], STANDINS[command[0]], *[here(a) for a in command]]
    cwd = here(workdir) if workdir else root
    if not os.path.isdir(cwd):
        print(f"docker: the working directory {workdir!r} does not exist in the image", file=sys.stderr)
        return None
    logs = os.path.join(root, "logs")
    os.makedirs(logs, exist_ok=True)
    environ = {**os.environ, **dict(e.split("=", 1) for e in env)}
    with open(os.path.join(logs, name + ".log"), "ab") as out:
        return subprocess.Popen(argv, cwd=cwd, env=environ, start_new_session=True, stdout=out,
                                stderr=subprocess.STDOUT)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a child of an exited fake docker is reaped by init; a zombie is not running
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return True


def inspect(argv: list[str], state: dict) -> int:
    fmt, name = argv[1], argv[2]
    c = state.get(name)
    if c is None:
        print(f"Error: No such object: {name}", file=sys.stderr)
        return 1
    running = "true" if not os.environ.get("KILN_FAKE_DOCKER_EXEC_ROOT") or alive(c["pid"]) else "false"
    if ".State.Running" in fmt:
        print(f"{running} {c['labels'].get('kiln.config', '')}")
    elif ".State.Status" in fmt:
        print("running 0 0" if running == "true" else "exited 1 0")
    else:
        print("0")  # RestartCount
    return 0


def main(argv: list[str]) -> int:
    state_file = os.environ["KILN_FAKE_DOCKER_STATE"]
    with open(os.environ["KILN_FAKE_DOCKER_LOG"], "a", encoding="utf-8") as log:
        log.write(json.dumps(argv) + "\n")
    state = load(state_file)
    cmd, rest = argv[0], argv[1:]
    if cmd == "info":
        return 0
    if cmd == "ps":  # ps -a --filter label=kiln.host=H --format '{{.Names}} {{.Label "kiln.gpu"}}'
        host = rest[rest.index("--filter") + 1].split("=", 2)[2]
        for name, c in sorted(state.items()):
            if c["labels"].get("kiln.host") == host:
                print(name, c["labels"].get("kiln.gpu", ""))
        return 0
    if cmd == "logs":
        log = os.path.join(os.environ.get("KILN_FAKE_DOCKER_EXEC_ROOT", ""), "logs", rest[-1] + ".log")
        if os.environ.get("KILN_FAKE_DOCKER_EXEC_ROOT") and os.path.exists(log):
            with open(log, encoding="utf-8", errors="replace") as f:
                sys.stdout.write("".join(f.readlines()[-15:]))
        return 0
    if cmd == "inspect":
        return inspect(rest, state)
    if cmd == "rm":
        name = rest[-1]
        c = state.pop(name, None)
        if c is None:
            return 1
        try:
            os.killpg(c["pid"], signal.SIGTERM)  # its own session: the server and what it started
        except ProcessLookupError:
            pass
        save(state_file, state)
        return 0
    if cmd == "run":
        rc = run(rest, state)
        save(state_file, state)
        return rc
    print(f"fake docker: {cmd} is not simulated", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
