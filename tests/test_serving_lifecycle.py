"""Serving on a host: what each unit runs (Triton or trtllm-serve), that provision.sh leaves every
unit serving (readiness wait, bounded, with a clear failure) and that a reboot brings serving back.

The commands are checked against the pinned runtimes' flag sets (compiler/runtimes/data/
<runtime>.json, with their sources). The host tests run the generated provision.sh
against the nvidia-smi stand-in (the one piece of hardware that cannot exist here) and the real
Docker daemon; inside the containers, stand-ins for tritonserver and trtllm-serve refuse any flag
outside the pinned flag set and then serve their runtime's readiness paths with busybox httpd, a
real HTTP server in a real process, which provision.sh asks over TCP as it would ask the real
servers. No GPU and no NVIDIA container runtime: devices are passed as NVIDIA_VISIBLE_DEVICES.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest
from ruamel.yaml import YAML

from compiler.actions import image_context, llmapi, runtimes
from compiler.store.digests import DigestCache
from compiler.graph.kinds import RunContext
from compiler.lower import lower
from compiler.pipeline import validate_path
from compiler.serving import layout
from compiler.serving import triton as repo
from compiler.targets.hosts import hostscript
from tests.fakes import fake_host
from tests.test_host_scripts import Host, example_files, output, write_script

ROOT = Path(__file__).resolve().parents[1]
TRTLLM_SERVE = ROOT / "tests" / "data" / "trtllm-serve" / "kiln.yaml"
LOG = logging.getLogger("test-serving-lifecycle")


# --- what a unit runs (no Docker) ----------------------------------------------------------------
def _lowered(spec: Path):
    result = validate_path(spec)
    assert not result.diagnostics, [d.message for d in result.diagnostics]  # the release image is checked too
    return result, lower(result, DigestCache(None))


def test_trtllm_serve_command_fits_the_pinned_cli_and_agrees_with_the_options_file() -> None:
    """`trtllm-serve <checkpoint> --extra_llm_api_options <options.yaml> --host --port --backend --tp_size --pp_size`,
    each flag one that serve.py of the 1.2 line defines, each value the one the unit needs."""
    result, graph = _lowered(TRTLLM_SERVE)
    units = {u.model: u for u in graph.actions["host-script/h100"].params.units}
    chat = units["chat"]
    cmd = chat.serving.command
    assert chat.serving.runtime == "trtllm-serve" and cmd[0] == "trtllm-serve"
    assert runtimes.check_command("trtllm-serve", cmd) == []
    flags = runtimes.table()["trtllm-serve"]["flags"]
    assert all(w in flags for w in cmd if w.startswith("--"))
    assert cmd[1] == layout.model_dir("chat")  # the checkpoint, as the image holds it
    assert runtimes.flag_value(cmd, "--config", "--extra_llm_api_options") == runtimes.options_path("chat")
    assert runtimes.flag_value(cmd, "--host") == "0.0.0.0"
    assert runtimes.flag_value(cmd, "--port") == str(chat.ports["http"]) == "9000"
    assert runtimes.flag_value(cmd, "--backend") == "pytorch"
    # a flag and the options file set the same LlmArgs field (the file wins): they must agree
    options = llmapi.options(result.resolved.models["chat"])
    llm_args = runtimes.table()["trtllm-serve"]["llm_args"]
    for flag in ("--tp_size", "--pp_size"):
        assert runtimes.flag_value(cmd, flag) == str(options[llm_args[flag]])
    assert options["tensor_parallel_size"] == 2
    # readiness: trtllm-serve's own endpoints on its one port; the options layer goes into the image
    assert chat.serving.ready == ["/health", "/v1/models"] and chat.serving.port == 9000
    assert chat.serving.multi_gpu and "--ulimit" in runtimes.container_options(chat.serving)
    ctx = graph.actions["image-context/h100"]
    assert ctx.params.options == {"chat": "llmapi-options/chat"} and "llmapi-options/chat" in ctx.deps
    # the Triton repository holds only the model Triton serves
    assert [m.name for m in graph.actions["triton-repo/h100"].params.models] == ["other"]
    assert units["other"].serving.runtime == "triton"


def test_the_flag_check_refuses_what_the_cli_refuses() -> None:
    ok = runtimes.unit_serving("trtllm-serve", "llmapi", "m", {"http": 8000, "grpc": 8001, "metrics": 8002}).command
    assert runtimes.check_command("trtllm-serve", ok) == []
    assert runtimes.check_command("trtllm-serve", ok + ["--served_model_name=m"]) == \
        ["--served_model_name is not a trtllm-serve flag"]  # 1.3 and later only
    assert runtimes.check_command("trtllm-serve", [w.replace("pytorch", "torch") for w in ok]) == \
        ["--backend 'torch' is not one of pytorch, tensorrt, trt, _autodeploy"]
    assert runtimes.check_command("trtllm-serve", ok[:1] + ok[2:]) == ["trtllm-serve takes 1 positional argument(s), got 0"]
    assert runtimes.check_command("trtllm-serve", ok + ["--port", "1"]) == ["--port is given twice"]
    triton = runtimes.unit_serving("triton", "engine", "m", {"http": 8000, "grpc": 8001, "metrics": 8002}).command
    assert runtimes.check_command("triton", triton) == []  # --load-model may repeat
    assert runtimes.check_command("triton", triton + ["--model-control-mode=auto"]) == \
        ["--model-control-mode 'auto' is not one of none, poll, explicit", "--model-control-mode is given twice"]
    with pytest.raises(runtimes.ServingCommandError, match="llmapi target only"):
        runtimes.unit_serving("trtllm-serve", "engine", "m", {"http": 8000, "grpc": 8001, "metrics": 8002})


def test_engine_units_load_every_model_the_repository_defines(tmp_path: Path) -> None:
    """The engine pipeline's BLS model is not a step of the ensemble, so loading the ensemble does
    not load it: a unit loads each of the five models its repository defines, and is ready only
    when each answers /v2/models/<name>/ready."""
    result = validate_path(ROOT / "examples" / "b200-mig-three-models" / "kiln.yaml")
    params = repo.repository_params(result.resolved, "b200-a", target="engine")
    files = repo.render(params)
    models = {path.split("/")[0] for path in files if path.endswith("/config.pbtxt")}
    names = sorted(m.name for m in params.models)
    assert names == ["chat", "coder", "intent"]  # no model name is a prefix of another's
    for m in params.models:
        defined = {d for d in models if d == m.name or d.startswith(m.name + "-")}
        assert len(defined) == 5
        serving = runtimes.unit_serving("triton", "engine", m.name, {"http": 8000, "grpc": 8001, "metrics": 8002})
        loaded = {w.split("=", 1)[1] for w in serving.command if w.startswith("--load-model=")}
        assert loaded == defined and f"{m.name}-bls" in loaded, (loaded, defined)
        assert {f"/v2/models/{d}/ready" for d in defined} <= set(serving.ready)
        assert set(serving.files) == {f"{layout.REPOSITORY_DIR}/{d}/config.pbtxt" for d in defined}


def test_one_options_file_two_runtimes(tmp_path: Path) -> None:
    """trtllm-serve reads the llmapi-options artifact byte for byte (copied into the image); the
    Triton llmapi model reads the same options as model.yaml, plus where the checkpoint is."""
    result, graph = _lowered(TRTLLM_SERVE)
    deps = {}
    for aid in graph.actions["image-context/h100"].deps:
        out = tmp_path / aid.replace("/", "_")
        out.mkdir()
        action = graph.actions[aid]
        if action.kind == "llmapi-options":
            llmapi.KIND.run(action.params, RunContext(out, {}, {}, LOG))
        elif action.kind == "model-source":
            (out / "config.json").write_text("{}")
        else:
            (out / "other").mkdir()
            (out / "other" / "config.pbtxt").write_text('name: "other"\n')
        deps[aid] = out
    ctx_out = tmp_path / "context"
    ctx_out.mkdir()
    image_context.KIND.run(graph.actions["image-context/h100"].params, RunContext(ctx_out, {}, deps, LOG))
    in_image = ctx_out / "layers" / "llmapi" / runtimes.options_path("chat").lstrip("/")
    artifact = deps["llmapi-options/chat"] / llmapi.OUTPUT
    assert in_image.read_bytes() == artifact.read_bytes()
    assert YAML(typ="safe").load(in_image.read_text()) == llmapi.options(result.resolved.models["chat"])
    triton_yaml = YAML(typ="safe").load(repo.llm_api_yaml("chat", llmapi.options(result.resolved.models["chat"])))
    assert {k: v for k, v in triton_yaml.items() if k not in ("model", "backend", "tokenizer")} == \
        YAML(typ="safe").load(artifact.read_text())
    dockerfile = (ctx_out / "Dockerfile").read_text()
    assert "COPY layers/llmapi/ /" in dockerfile and "COPY layers/repository/ /" in dockerfile
    serve = (ctx_out / "layers/entrypoint" / runtimes.ENTRYPOINT.lstrip("/")).read_text()
    assert f"exec trtllm-serve {layout.model_dir('chat')} --extra_llm_api_options {runtimes.options_path('chat')}" in serve


# --- on a host, with real Docker ---------------------------------------------------------------
def docker_reachable() -> bool:
    return shutil.which("docker") is not None and \
        subprocess.run(["docker", "info"], capture_output=True).returncode == 0


needs_docker = pytest.mark.skipif(not docker_reachable(), reason="no Docker daemon reachable (docker info "
                                  "failed): containers run for real only where dockerd is up")

STAND_IN = r"""#!/bin/sh
# Stand-in for {program} in the test image: refuses a flag outside the pinned flag set
# (/etc/kiln-test/{program}.flags, from compiler/runtimes/data), then, after a load time, serves
# the runtime's readiness paths over HTTP with busybox httpd (mode ready), serves nothing the
# readiness check accepts (mode never), or exits (mode crash), or exits once and serves when Docker
# restarts it (mode crash-once: an early CUDA failure while the fabric settles).
set -eu
mode=$(busybox cat /etc/kiln-test/mode)
www=/tmp/www
busybox mkdir -p "$www"
port=""
prev=""
for a in "$@"; do
  case "$a" in
    --*)
      flag=${{a%%=*}}
      if ! busybox grep -qxF -- "$flag" /etc/kiln-test/{program}.flags; then
        echo "{program}: no such option: $flag" >&2
        exit 2
      fi ;;
  esac
  case "$prev:$a" in
    *:--http-port=*) port=${{a#*=}} ;;
    --port:*) port=$a ;;
    *:--load-model=*) m=${{a#*=}}; busybox mkdir -p "$www/v2/models/$m"; [ "$mode" = never ] || : >"$www/v2/models/$m/ready" ;;
  esac
  prev=$a
done
[ -n "$port" ] || {{ echo "{program}: no port" >&2; exit 2; }}
echo "{program} $* (mode $mode)"
busybox sleep "$(busybox cat /etc/kiln-test/load_s)"
[ "$mode" != crash ] || {{ echo "{program}: out of memory while loading (stand-in)" >&2; exit 1; }}
if [ "$mode" = crash-once ]; then
  [ -e /tmp/kiln-crashed ] || {{ : >/tmp/kiln-crashed; echo "{program}: CUDA error while loading (stand-in)" >&2; exit 1; }}
  mode=ready
fi
if [ "$mode" = ready ]; then
  busybox mkdir -p "$www/v2/health" "$www/v1"
  : >"$www/v2/health/ready"
  : >"$www/health"
  echo '{{"object": "list", "data": [{{"id": "model"}}]}}' >"$www/v1/models"
fi
echo "{program}: listening on $port"
exec busybox httpd -f -p "$port" -h "$www"
"""


def _image(tmp: Path, tag: str, mode: str, load_s: int, entrypoint: str) -> str:
    busybox = shutil.which("busybox")
    if busybox is None:
        pytest.skip("busybox is not installed (Debian package busybox-static: a static binary runs FROM scratch)")
    ctx = tmp / f"image-{mode}"
    for d in ("bin", "etc/kiln-test", "tmp", "opt/kiln/bin"):
        (ctx / d).mkdir(parents=True, exist_ok=True)
    shutil.copy(busybox, ctx / "bin" / "busybox")
    for applet in ("sh", "wget"):  # sh for Docker's health check, wget for the entrypoint's probe
        (ctx / "bin" / applet).symlink_to("busybox")
    for rt in runtimes.RUNTIMES:
        data = runtimes.table()[rt]
        program = data["program"]
        (ctx / "etc" / "kiln-test" / f"{program}.flags").write_text("\n".join(sorted(data["flags"])) + "\n")
        (ctx / "bin" / program).write_text(STAND_IN.format(program=program))
        (ctx / "bin" / program).chmod(0o755)
    (ctx / "etc" / "kiln-test" / "mode").write_text(mode + "\n")
    (ctx / "etc" / "kiln-test" / "load_s").write_text(f"{load_s}\n")
    (ctx / "opt" / "kiln" / "bin" / "serve").write_text(entrypoint)
    (ctx / "opt" / "kiln" / "bin" / "serve").chmod(0o755)
    (ctx / "Dockerfile").write_text("FROM scratch\nCOPY . /\nENV PATH=/bin\n")
    image = f"kiln-test-serving:{tag}-{mode}"
    subprocess.run(["docker", "build", "-q", "-t", image, str(ctx)], check=True, capture_output=True)
    return image


def _free_ports(n: int) -> list[int]:
    socks, ports = [], []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
        ports.append(s.getsockname()[1])
    for s in socks:
        s.close()
    return ports


class Deployment:
    """The quickstart's host (one H100, two 1g.10gb MIG slices) under a name of its own, its first
    unit served by Triton and its second by trtllm-serve, on free ports."""

    def __init__(self, tmp: Path, mode: str, load_s: int = 1):
        base = json.loads(example_files("quickstart")["dev-h100"]["desired-state.json"])
        self.host = f"kt{os.getpid() % 100000}-{mode}"
        plan = dict(base, host=self.host)
        self.plan = plan
        ports = _free_ports(6)
        self.units = []
        for n, inst in enumerate(plan["gpus"][0]["mig"]["instances"]):
            p = {"http": ports[3 * n], "grpc": ports[3 * n + 1], "metrics": ports[3 * n + 2]}
            runtime = ("triton", "trtllm-serve")[n]
            serving = runtimes.unit_serving(runtime, "llmapi", inst["serves"], p)
            self.units.append({"id": f"{self.host}/gpu0/mig{inst['slot']}", "model": inst["serves"], "gpus": [0],
                               "mig_slot": inst["slot"], "ports": p, "serving": serving.to_json()})
        context = hostscript.script_context(plan, self.units, "test")
        self.script = write_script({"provision.sh": hostscript.render_script(context).encode()}, tmp / "script")
        entry = image_context.environment().get_template(image_context.ENTRYPOINT).render(
            **image_context.entrypoint_context(self.host, [image_context.ImageUnit.model_validate(
                {k: u[k] for k in ("id", "model", "ports", "serving")}) for u in self.units]))
        self.remove_containers()  # left by an interrupted earlier run
        self.image = _image(tmp, self.host, mode, load_s, entry)
        (tmp / "host").mkdir()
        self.h = Host(tmp / "host", plan)
        self.names = [hostscript.container_name(self.host, u["id"]) for u in self.units]

    def run(self, *args: str, timeout_s: int = 60) -> subprocess.CompletedProcess:
        env = {"KILN_DOCKER": "docker", "KILN_GPU_ATTACH": "env", "KILN_READY_TIMEOUT": str(timeout_s),
               "KILN_READY_POLL": "1"}
        return self.h.run(self.script, *args, env=env)

    def inspect(self, name: str) -> dict:
        return json.loads(subprocess.run(["docker", "inspect", name], capture_output=True, text=True,
                                         check=True).stdout)[0]

    def mig_uuids(self) -> dict[int, str]:
        """Placement start -> the MIG device UUID the stand-in reports now."""
        state = self.h.load()
        return {gi["start"]: gi["cis"][0]["uuid"] for gi in state["gpus"][0]["gis"]}

    def remove_containers(self) -> None:
        ids = subprocess.run(["docker", "ps", "-aq", "--filter", f"label=kiln.host={self.host}"],
                             capture_output=True, text=True).stdout.split()
        if ids:
            subprocess.run(["docker", "rm", "-f", *ids], capture_output=True)

    def cleanup(self) -> None:
        self.remove_containers()
        subprocess.run(["docker", "rmi", "-f", self.image], capture_output=True)


@pytest.fixture
def deployment(tmp_path: Path):
    made: list[Deployment] = []

    def make(mode: str, load_s: int = 1) -> Deployment:
        d = Deployment(tmp_path / mode, mode, load_s)
        made.append(d)
        return d

    yield make
    for d in made:
        d.cleanup()


def _get(port: int, path: str) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


@needs_docker
def test_units_serve_and_a_reboot_recreates_instances_then_containers(deployment) -> None:
    d = deployment("ready", load_s=3)
    first = d.run("--image", d.image)
    assert first.returncode == 0, output(first)
    lines = first.stdout.splitlines()
    ready = [i for i, line in enumerate(lines) if ": ready after " in line]
    done = [i for i, line in enumerate(lines) if "done:" in line]
    assert len(ready) == 2 and done and max(ready) < done[0], first.stdout  # "done" only once both serve
    assert any(int(lines[i].split("ready after ")[1].split("s")[0]) >= 2 for i in ready)  # it waited for the load
    uuids = d.mig_uuids()
    for unit, name in zip(d.units, d.names):
        info = d.inspect(name)
        assert info["State"]["Running"] and info["HostConfig"]["NetworkMode"] == "host"
        start = next(i["start"] for i in d.plan["gpus"][0]["mig"]["instances"] if i["slot"] == unit["mig_slot"])
        assert f"NVIDIA_VISIBLE_DEVICES={uuids[start]}" in info["Config"]["Env"]
        assert info["Config"]["Labels"]["kiln.runtime"] == unit["serving"]["runtime"]
        assert info["Args"] == unit["serving"]["command"][1:]  # the stand-in accepted every flag
        assert info["HostConfig"]["ShmSize"] == 2 * 1024 ** 3
        for path in unit["serving"]["ready"]:
            assert _get(unit["ports"]["http"], path) == 200
        # the container's health check: the image's entrypoint probing the same paths from inside
        health = info["Config"]["Healthcheck"]["Test"]
        assert health[0] == "CMD-SHELL"
        assert subprocess.run(["docker", "exec", name, "/bin/sh", "-c", health[1]]).returncode == 0
    assert (d.h.state_dir / "image").read_text().strip() == d.image

    again = d.run()  # no --image: the recorded one
    assert again.returncode == 0 and "no changes" in again.stdout, output(again)
    assert f"image {d.image} (recorded" in again.stdout

    # A reboot: the GPU instances are gone (they come back with new UUIDs), and so are the servers.
    for name in d.names:
        subprocess.run(["docker", "stop", "-t", "1", name], check=True, capture_output=True)
    fake_host.reboot(d.h.state)
    d.h.boot.write_text("boot-2\n")
    check = d.run("--check")
    assert check.returncode == 1 and "drift: GPU 0: MIG layout: live [ ] want" in check.stdout, output(check)
    boot = d.run("--boot")
    assert boot.returncode == 0, output(boot)
    created = [c["argv"] for c in d.h.mutations() if "-cgi" in c["argv"]]
    assert len(created) == 2  # the instances first...
    new = d.mig_uuids()
    assert set(new.values()).isdisjoint(uuids.values())
    for unit, name in zip(d.units, d.names):  # ...then each container on its new device, serving
        info = d.inspect(name)
        start = next(i["start"] for i in d.plan["gpus"][0]["mig"]["instances"] if i["slot"] == unit["mig_slot"])
        assert f"NVIDIA_VISIBLE_DEVICES={new[start]}" in info["Config"]["Env"] and info["State"]["Running"]
        assert f"container {name}: ready after" in boot.stdout
    assert boot.stdout.index(": ready after") < boot.stdout.index("done:")
    final = d.run("--check")
    assert final.returncode == 0 and "converged" in final.stdout, output(final)


@needs_docker
def test_a_unit_that_never_serves_fails_the_run_within_its_bound(deployment) -> None:
    d = deployment("never")
    started = time.monotonic()
    proc = d.run("--image", d.image, timeout_s=6)
    elapsed = time.monotonic() - started
    assert proc.returncode == 1, output(proc)
    assert elapsed < 6 + 60, elapsed  # the bound, plus container starts and one last probe
    triton, trtllm = d.units
    assert (f"container {d.names[0]}: not ready after 6s: GET http://127.0.0.1:{triton['ports']['http']}"
            "/v2/health/ready answered 404") in proc.stderr, proc.stderr
    assert (f"container {d.names[1]}: not ready after 6s: GET http://127.0.0.1:{trtllm['ports']['http']}"
            "/health answered 404") in proc.stderr, proc.stderr
    assert "listening on" in proc.stderr  # the last lines the server wrote come with the failure
    assert "done:" not in proc.stdout and "finished with 2 error(s)" in proc.stdout
    check = d.run("--check")
    assert check.returncode == 1 and f"drift: container {d.names[0]}: running but not ready" in check.stdout
    health = d.inspect(d.names[0])["Config"]["Healthcheck"]["Test"][1]
    assert subprocess.run(["docker", "exec", d.names[0], "/bin/sh", "-c", health]).returncode != 0


@needs_docker
def test_a_server_restarted_once_while_loading_is_waited_for(deployment) -> None:
    """Docker restarts a server that fails early (--restart unless-stopped); if the restarted
    server serves within the readiness window, the unit is ready, not failed."""
    d = deployment("crash-once")
    proc = d.run("--image", d.image, timeout_s=600)
    assert proc.returncode == 0, output(proc)
    # both units' servers fail once (one image): each is reported, whether the wait saw it
    # restarting or found it already served again
    for name in d.names:
        assert f"container {name}: restarted by Docker while loading" in proc.stdout, output(proc)
        assert f"container {name}: ready after" in proc.stdout


@needs_docker
def test_a_server_that_exits_while_loading_fails_at_once(deployment) -> None:
    d = deployment("crash")
    started = time.monotonic()
    proc = d.run("--image", d.image, timeout_s=600)
    assert proc.returncode == 1, output(proc)
    assert time.monotonic() - started < 120  # not the 600 s bound: a stopped server cannot become ready
    assert f"container {d.names[0]}: its server stopped before it was ready" in proc.stderr, proc.stderr
    assert "out of memory while loading (stand-in)" in proc.stderr
