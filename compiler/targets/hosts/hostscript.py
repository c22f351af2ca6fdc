"""`host-script`: the provisioning files of one host, generated from its `host-plan`.

Outputs:
  provision.sh                   converges the host to the plan (compiler/templates/host/provision.sh.j2)
  kiln-host-<host>.service       systemd unit running `provision.sh --boot` at every boot
  mig-parted.yaml                the same MIG layout for NVIDIA mig-parted (no placements there); not
                                 written when mig-parted cannot parse a profile of it (`-me` ones:
                                 provision.sh creates those with nvidia-smi)
  desired-state.json             a copy of host-plan.json, the state the script converges to

The action reads the host plan (a dependency), the host's serving units with their ports and what
each runs, the routers of the disaggregated models it is the router host of
(disaggregated.py: one container each, without a GPU, started once the servers
on the host are ready) (compiler.actions.runtimes: the server's command, its readiness paths, its container
options, all in the parameters, so a change of the runtime table rebuilds the script), and the
templates, whose digests are in its parameters so a template change rebuilds it. Every value put
into the shell script passes through the `q` filter (shlex.quote); an unquoted `{{ value }}` is a
template error, so a name can never become shell syntax.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

from pydantic import Field

from compiler import resources
from compiler.actions import runtimes
from compiler.actions.base import ActionKind, Disruption, LowerContext, Params, RunContext
from compiler.actions.runtimes import UnitServing, ir_unit_serving
from compiler.actions.shell import Shell, shell_quote, words
from compiler.graph.model import Action
from compiler.ir.migparted import grouped_entries, mig_parted_problems
from compiler.params import Effect, changed_names, effect
from compiler.serving.yamlout import dump_yaml
from compiler.templating import only_quoted, strict_environment

from . import disaggregated as disagg_hosts
from .disaggregated import HostRouter

if TYPE_CHECKING:  # jinja2 loads when a template is rendered: plan and validate never need it
    from jinja2 import Environment

TEMPLATE_DIR = resources.template_dir("host")
SCRIPT_TEMPLATE, UNIT_TEMPLATE = "provision.sh.j2", "kiln-host.service.j2"
TEMPLATES = (SCRIPT_TEMPLATE, UNIT_TEMPLATE)
_DRIVER = re.compile(r"(>=|<=|==|>|<)?([0-9]+(?:\.[0-9]+)*)")
_UNIT_WORD = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def unit_word(value: object) -> Shell:
    """A word for a systemd unit file: systemd expands `$`, `%` and quotes on its own terms, so
    only plain names are accepted (spec names already are: [a-z0-9-])."""
    text = str(value)
    if not _UNIT_WORD.fullmatch(text):
        raise ValueError(f"{text!r} cannot be placed in a systemd unit file")
    return Shell(text)


@functools.lru_cache(maxsize=16)  # compiled templates are kept: an action per host or model
def environment(template_dir: Path = TEMPLATE_DIR) -> Environment:
    return strict_environment(template_dir, only_quoted((Shell,), "a host template", "|q"),
                              {"q": shell_quote, "unit": unit_word, "calls": calls},
                              comment_start_string="{##", comment_end_string="##}")  # bash uses `${#x}`


def calls(rows: list[dict], function: str, *keys: str) -> Shell:
    """One call of a bash function per row, its arguments the row's fields in order, each quoted:
    `{{ gpus|calls("plan_gpu", "index", "mig") }}` renders `plan_gpu 0 1` (a table the script reads)."""
    return Shell("\n".join(f"{function} {words([row[k] for k in keys])}" for row in rows))


def template_digests(template_dir: Path = TEMPLATE_DIR) -> dict[str, str]:
    return {name: "sha256:" + hashlib.sha256((template_dir / name).read_bytes()).hexdigest() for name in TEMPLATES}


def container_name(host: str, unit_id: str) -> str:
    """`kiln-<host>-<unit>`; Docker names allow [a-zA-Z0-9_.-], so '/' becomes '-' and '+' '_'."""
    local = unit_id[len(host) + 1:] if unit_id.startswith(host + "/") else unit_id
    return f"kiln-{host}-{local.replace('/', '-').replace('+', '_')}"


def _unset(value: object) -> bool:
    return not value


# provision.sh recreates a container whose settings (its kiln.config label) differ, and only that one
_RECREATES = Effect("restart", "provision.sh recreates each container whose settings changed (its kiln.config "
                               "label); the others keep running", ("container-restart",))
# A unit's field whose change the plan names as the cause of its container's recreation (rank 0), in the
# order the plan lists them; the others echo a cause (a port or model change also changes the server's
# argv), and are named by rank where no cause changed: environment, then the server command (which
# names the role), then the role's options digest (params.changed_names).
_CAUSE = Effect("restart", "what the container runs with: provision.sh recreates it", ("container-restart",), rank=0)
_ECHO = Effect("restart", "what the container runs with, also changed by a cause (the server's argv names the "
                          "model and its ports)", ("container-restart",))


class HostUnit(Params):
    id: Annotated[str, Effect("replace", "names the unit and its container: another id is another container")]
    model: Annotated[str, _CAUSE]
    ports: Annotated[dict[str, int], _CAUSE]  # http, grpc, metrics
    gpus: Annotated[list[int], _CAUSE]
    mig_slot: Annotated[int | None, _CAUSE]  # position in the GPU's `mig` list
    # what the container runs, and how it is checked to serve
    serving: Annotated[UnitServing, _ECHO.naming("server command", rank=2)]
    # disaggregated serving (left out of the parameters when unset: other units keep their keys):
    # the role it serves (prefill, decode), which its serving names too
    role: Annotated[str | None, _ECHO.naming("server command", rank=2)] = Field(default=None, exclude_if=_unset)
    # the UCX settings of its container
    environment: Annotated[dict[str, str], _ECHO.naming("environment", rank=1)] = Field(default={}, exclude_if=_unset)
    # digest of what it reads from the image ("": all of it; set for a role's server only)
    inputs: Annotated[str, _ECHO.naming("the {role} role's options", rank=3)] = Field(default="", exclude_if=_unset)


CAUSES = tuple(f for f in HostUnit.model_fields if effect(HostUnit, f) is _CAUSE)  # model, ports, gpus, mig_slot
_SCRIPT_ONLY = Effect("none", "the script's text or its wait: no container's settings")


class HostScriptParams(Params):
    host: Annotated[str, Effect("replace", "another host's script")]
    spec_name: Annotated[str, _SCRIPT_ONLY]  # in its header comment
    templates: Annotated[dict[str, str], _SCRIPT_ONLY]  # template file -> digest
    units: Annotated[list[HostUnit], _RECREATES]
    # the disaggregated models' routers here: a router's restart interrupts its model's every server
    routers: Annotated[list[HostRouter], _RECREATES] = Field(default=[], exclude_if=_unset)
    ready_timeout_s: Annotated[int, _SCRIPT_ONLY] = runtimes.ready_timeout_s()  # default bound on a model load


class HostScript(ActionKind[HostScriptParams]):
    kind, version, Params = "host-script", 2, HostScriptParams

    def lower(self, ctx: LowerContext) -> list[Action]:
        out = []
        digests = template_digests()
        for name in sorted(ctx.ir.hosts):
            if ctx.ir.hosts[name].spec.deploy != "host":
                continue  # a node pool: its host plan is the node layer (k8s-node-layer)
            units = [_host_unit(ctx, u) for u in ctx.ir.host_units(name)]
            params = HostScriptParams(host=name, spec_name=ctx.spec.name, templates=digests, units=units,
                                      routers=disagg_hosts.routers(ctx, name))
            out.append(self.action(f"{self.kind}/{name}", params, deps=(f"host-plan/{name}",)))
        return out

    def run(self, params: HostScriptParams, ctx: RunContext) -> None:
        if template_digests() != params.templates:
            raise RuntimeError("a host template changed after the plan was made; run the build again")
        plan_bytes = (ctx.deps[f"host-plan/{params.host}"] / "host-plan.json").read_bytes()
        plan = json.loads(plan_bytes)
        units = [u.to_json() for u in params.units]
        routers = [r.to_json() for r in params.routers]
        for name, data in render(plan, units, params.spec_name, plan_bytes, ready_timeout_s=params.ready_timeout_s,
                                 routers=routers).items():
            path = ctx.out / name
            path.write_bytes(data)
            if name == "provision.sh":
                path.chmod(0o755)
        ctx.log.info("%d GPUs, %d serving units, %d routers", len(plan["gpus"]), len(params.units), len(params.routers))


def _host_unit(ctx: LowerContext, u) -> HostUnit:
    unit = HostUnit(id=u.id, model=u.model, gpus=list(u.gpu_indexes), mig_slot=u.mig.instance_index if u.mig else None,
                    ports=u.ports.as_dict(), serving=ir_unit_serving(ctx.ir, u))
    if not disagg_hosts.is_disaggregated(ctx, u.model):
        return unit
    update = {"role": u.role, "environment": disagg_hosts.environment(ctx, u.model),
              "inputs": disagg_hosts.server_inputs(ctx, u.model, u.role)}
    if disagg_hosts.shares_host_namespaces(ctx, u.model, u.host):
        update["serving"] = unit.serving.model_copy(
            update={"options": disagg_hosts.namespace_options(unit.serving.options)})
    return unit.model_copy(update=update)


def _unit_context(host: str, unit_id: str, model: str, gpus: str, mig_start: object, serving: UnitServing,
                  env: list[str], inputs: str) -> dict:
    return {"id": unit_id, "name": container_name(host, unit_id), "model": model, "gpus": gpus, "mig_start": mig_start,
            "runtime": serving.runtime, "port": serving.port, "ports": "/".join(str(p) for p in serving.listens),
            "ready": " ".join(serving.ready), "command": words(serving.command),
            "options": words(serving.options + env), "ranks": serving.ranks, "inputs": inputs}


def script_context(plan: dict, units: list[dict], spec_name: str, ready_timeout_s: int | None = None,
                   routers: list[dict] | None = None) -> dict:
    """The values the templates place, from the host plan, the units and the routers (pure)."""
    host = plan["host"]
    m = _DRIVER.fullmatch((plan.get("driver") or "").strip())
    gpus = []
    by_index = {g["index"]: g for g in plan["gpus"]}
    for g in plan["gpus"]:
        locked, app = g.get("locked_clocks"), g.get("application_clocks")
        mig = g.get("mig")
        instances = mig["instances"] if mig else []
        gpus.append({
            "index": g["index"],
            "mig": 1 if mig else 0,
            "gis": " ".join(mig["create"]) if mig else "",
            "gi_names": " ".join(i["profile"] for i in instances),
            "lgc": ",".join(str(v) for v in locked["graphics_mhz"]) if locked else "",
            "lmc": f"{locked['memory_mhz']},{locked['memory_mhz']}" if locked and locked.get("memory_mhz") else "",
            "ac": f"{app['memory_mhz']},{app['graphics_mhz']}" if app else "",
            "pl": g.get("power_limit_w") or "",
        })
    rendered_units = []
    for u in units:
        start = ""
        if u["mig_slot"] is not None:
            gpu = by_index[u["gpus"][0]]
            start = next(i["start"] for i in gpu["mig"]["instances"] if i["slot"] == u["mig_slot"])
        env = [w for k, v in sorted((u.get("environment") or {}).items()) for w in ("--env", f"{k}={v}")]
        rendered_units.append(_unit_context(host, u["id"], u["model"], ",".join(str(i) for i in u["gpus"]), start,
                                            UnitServing.model_validate(u["serving"]), env, u.get("inputs") or ""))
    # routers last: provision.sh starts them once the servers before them are ready
    for r in routers or []:
        rendered_units.append(_unit_context(host, r["id"], r["model"], "", "", UnitServing.model_validate(r["serving"]),
                                            [], r["inputs"]))
    return {"host": host, "spec_name": spec_name, "gpu_model": plan["gpu"],
            "ready_timeout": runtimes.ready_timeout_s() if ready_timeout_s is None else ready_timeout_s,
            "driver_op": (m.group(1) or "==") if m else "", "driver_version": m.group(2) if m else "",
            "persistence": 1 if plan.get("persistence", True) else 0,
            "restarts_tolerated": boot_facts()["restarts_tolerated"]["value"],
            "gpus": gpus, "units": rendered_units}


def boot_facts() -> dict:
    return json.loads(resources.read_data("actions", "data", "host_boot.json"))


def boot_after(gpu: str) -> list[str]:
    """Units the boot unit wants and is ordered after besides Docker's: Fabric Manager where the
    GPU sits on an NVSwitch baseboard (data/host_boot.json, with its source)."""
    fm = boot_facts()["fabric_manager"]
    return [fm["unit"]] if gpu in fm["gpus"] else []


def render_script(context: dict, template_dir: Path = TEMPLATE_DIR) -> str:
    return environment(template_dir).get_template(SCRIPT_TEMPLATE).render(**context)


def mig_parted_config(plan: dict) -> dict:
    """mig-parted's v1 config for the plan: GPUs with the same layout grouped; GPUs without MIG
    listed with `mig-enabled: false` (mig-parted api/spec/v1; it has no placement field)."""
    entries = grouped_entries((g["index"], _profile_counts(g)) for g in plan["gpus"])
    return {"version": "v1", "mig-configs": {f"kiln-{plan['host']}": entries}}


def _profile_counts(gpu: dict) -> tuple[tuple[str, int], ...]:
    """A GPU of the plan as mig-parted counts it: (profile, instances), sorted; () where MIG is off."""
    return tuple(sorted(Counter(i["profile"] for i in (gpu["mig"] or {}).get("instances", [])).items()))


def render(plan: dict, units: list[dict], spec_name: str, plan_bytes: bytes,
           template_dir: Path = TEMPLATE_DIR, ready_timeout_s: int | None = None,
           routers: list[dict] | None = None) -> dict[str, bytes]:
    host = plan["host"]
    context = script_context(plan, units, spec_name, ready_timeout_s, routers)
    env = environment(template_dir)
    header = (f"# mig-parted config for host {host}, generated by kiln. mig-parted has no placement field and\n"
              "# tries creation orders itself; provision.sh creates the same instances with explicit placements.\n"
              f"# Apply: nvidia-mig-parted apply -f mig-parted.yaml -c kiln-{host}\n")
    mig_parted = mig_parted_config(plan)
    files = {
        "provision.sh": env.get_template(SCRIPT_TEMPLATE).render(**context).encode(),
        f"kiln-host-{host}.service": env.get_template(UNIT_TEMPLATE).render(
            host=host, after_units=boot_after(plan["gpu"])).encode(),
        "mig-parted.yaml": (header + dump_yaml(mig_parted)).encode(),
        "desired-state.json": plan_bytes,
    }
    if mig_parted_problems(mig_parted):  # a file its only consumer refuses is not written (issue 33)
        del files["mig-parted.yaml"]
    return files


KIND = HostScript()


def disruptions(old: HostScriptParams | None, new: HostScriptParams) -> list[Disruption]:
    """provision.sh recreates a unit's container when what it runs with changes (its model,
    ports, GPUs, MIG instance, server command, environment, or what a disaggregated server
    reads from the image); units that stay the same keep running. A router is recreated when
    its command or config changes; that interrupts the requests of its model's every server,
    on this host or another."""
    if old is None:
        return []
    before = {u.id: u for u in old.units}
    out = []
    for u in new.units:
        prev = before.get(u.id)
        if prev is None or prev == u:
            continue
        what = changed_names(prev, u)  # every field but the id is ranked, so something is named
        name = u.id.split('/', 1)[-1] + (f" ({u.role} server)" if u.role else "")
        for g in u.gpus:
            out.append(Disruption(new.host, g, "container-restart", f"{name} is recreated ({', '.join(what)} changed)"))
    routers = {r.id: r for r in old.routers}
    for r in new.routers:
        prev = routers.get(r.id)
        if prev is None or (prev.serving, prev.inputs) == (r.serving, r.inputs):
            continue
        what = "config" if prev.serving == r.serving else "command"
        for host, g in r.interrupts:
            out.append(Disruption(host, g, "container-restart",
                                  f"{r.id.split('/', 1)[-1]} (router of {r.model}) is recreated ({what} changed)"))
    return out
