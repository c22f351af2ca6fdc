"""`kiln init`: render the CI workflows in compiler/templates/ci/ into a repository's .github/workflows/.

The templates are Jinja2 with [[ ]] / [% %] delimiters, because GitHub's own ${{ }} expressions
must pass through untouched. Values are checked against plain character sets before rendering:
they land inside YAML and shell, and nothing there may need quoting.
"""

from __future__ import annotations

import functools
import json
import re
from pathlib import Path

import jinja2

from compiler import resources

from .kilnsource import QUANTIZE_EXTRA, TORCH_PIN, KilnSource

TEMPLATES = resources.template_dir("ci")
WORKFLOWS = {"kiln-plan.yml": "kiln-plan.yml.j2", "kiln-release.yml": "kiln-release.yml.j2"}
ACTIONLINT_CONFIG = "actionlint.yaml"  # beside workflows/, under .github/, where actionlint looks for it
BUILDERS_FILE = "kiln-builders.yml"  # under .github/: the runner classes the release builds on
# GitHub's standard hosted Linux runner for public repositories: 4 CPUs, 16 GB of memory, 14 GB of
# SSD (GitHub docs, "GitHub-hosted runners reference", standard runners); read as GiB, a slight
# overstatement of 7 %, below the margins of the sizes.
HOSTED_RUNNER = {"runs-on": ["ubuntu-latest"], "host_memory_gib": 16, "disk_gib": 14, "has": ["torch", "network", "docker"]}
# A GPU runner class kiln init writes for each GPU model of the spec's hosts: host memory and disk
# per GPU memory, Kiln's guess (an 8 x H100 DGX has 2 TB of memory for 640 GB of GPU memory, about 3x);
# the file says to declare what the runners really have.
HOST_PER_GPU_MEMORY, DISK_PER_GPU_MEMORY = 2, 4
_PATH_RE = re.compile(r"[A-Za-z0-9._/-]+")
_REGISTRY_RE = re.compile(r"[A-Za-z0-9._:/-]+")
_LABEL_RE = re.compile(r"[A-Za-z0-9._-]+")
DEFAULT_GPU_RUNNER = ("self-hosted", "linux", "gpu")


class InitConflict(Exception):
    """A value kiln cannot put in a workflow, or a workflow file that differs (without --force)."""


@functools.lru_cache(maxsize=1)
def action_pins() -> dict:
    """compiler/gitops/data/action_pins.json: per action, the tag the workflows use and its commit."""
    return json.loads(resources.read_data("gitops", "data", "action_pins.json"))


def pinned_uses() -> dict[str, str]:
    """Action -> `owner/name@<full commit> # <tag>`: a tag can be moved to other code, a commit cannot;
    the comment says which release the commit is (and lets update bots bump it)."""
    out = {}
    for action, entry in action_pins()["actions"].items():
        (release,) = [r for r in entry["releases"] if r["tag"] == entry["pin"]]
        out[action] = f"{action}@{release['commit']} # {release['tag']}"
    return out


def builders_text(hosts, gpu_runner: tuple[str, ...]) -> str:
    """.github/kiln-builders.yml (compiler/machines.py): the hosted runner, then one class per
    GPU model of the spec's hosts (ResolvedHost), smallest GPU memory first, on the GPU runner
    labels plus the GPU's own label."""
    gpus: dict[str, tuple] = {}
    for h in hosts:
        if h.gpu is not None:
            count = max(gpus.get(h.gpu.name, (None, 0))[1], h.spec.count or 1)
            gpus[h.gpu.name] = (h.gpu, count)
    lines = ["# Installed by `kiln init`: the classes of CI runners that build the spec's actions, cheapest first.",
             "# Each action builds on the class that holds it (`kiln plan --builders` shows where). The GPU classes",
             f"# come from the spec's hosts; their memory and disk are Kiln's guesses ({HOST_PER_GPU_MEMORY}x and "
             f"{DISK_PER_GPU_MEMORY}x the GPUs' memory):",
             "# declare what your runners have. Edit freely, `kiln init --force` rewrites it.", "builders:", "  cpu:"]
    lines += [f"    {k}: [{', '.join(v)}]" if isinstance(v, list) else f"    {k}: {v}" for k, v in HOSTED_RUNNER.items()]
    for gpu, count in sorted(gpus.values(), key=lambda gc: (gc[0].memory_mib, gc[0].name)):
        total = gpu.memory_mib / 1024 * count
        lines += [f"  {runner_label(gpu.name)}:", f"    runs-on: [{', '.join(gpu_runner + (runner_label(gpu.name),))}]",
                  f"    gpu: {gpu.name}", f"    gpus: {count}",
                  f"    host_memory_gib: {int(total * HOST_PER_GPU_MEMORY)}",
                  f"    disk_gib: {int(total * DISK_PER_GPU_MEMORY)}", "    has: [torch, gpu, docker, network]"]
    return "\n".join(lines) + "\n"


def runner_label(gpu_name: str) -> str:
    """A runner label for a GPU model: "H100-SXM5-80GB" -> "h100-sxm5-80gb"."""
    return re.sub(r"[^a-z0-9.-]+", "-", gpu_name.lower()).strip("-")


def actionlint_config(gpu_runner: tuple[str, ...]) -> str:
    """.github/actionlint.yaml: the self-hosted runner labels the GPU jobs use, which actionlint
    would otherwise report as unknown (it knows GitHub-hosted labels and self-hosted, linux, ...)."""
    labels = "".join(f"    - {label}\n" for label in gpu_runner if label != "self-hosted")
    return ("# Installed by `kiln init` for actionlint: the labels of the self-hosted runners the Kiln workflows\n"
            "# run on (kiln init --gpu-runner). Edit freely, `kiln init --force` rewrites it.\n"
            "self-hosted-runner:\n  labels:" + ("\n" + labels if labels else " []\n"))


@functools.lru_cache(maxsize=16)  # compiled templates are kept: an action per host or model
def _environment() -> jinja2.Environment:
    return jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES), undefined=jinja2.StrictUndefined,
                              variable_start_string="[[", variable_end_string="]]",
                              block_start_string="[%", block_end_string="%]",
                              comment_start_string="[#", comment_end_string="#]",
                              keep_trailing_newline=True, autoescape=False)


def render_workflows(spec: str, registry: str, source: KilnSource, *,
                     gpu_runner: tuple[str, ...] = DEFAULT_GPU_RUNNER, branch: str = "main",
                     python: str = "3.11", sign: bool = True) -> dict[str, str]:
    """Pure: workflow file name -> text. `source`: the repository and commit the jobs install Kiln
    from (compiler/gitops/kilnsource.py); jobs that quantize install the torch pin first. `sign`:
    every job that publishes signs keyless (`kiln publish --keyless`, with `id-token: write`)."""
    if not _PATH_RE.fullmatch(spec) or spec.startswith("/") or ".." in spec.split("/"):
        raise InitConflict(f"spec path {spec!r}: use a relative path of letters, digits, '.', '_', '-' and '/'")
    if "@" in registry:  # user:password@host: a secret never goes into a workflow file, nor into a message
        raise InitConflict(f"registry {'***@' + registry.rpartition('@')[2]!r} carries credentials: a workflow names "
                           "the registry alone and reads KILN_REGISTRY_USERNAME and KILN_REGISTRY_PASSWORD from the "
                           "CI's secrets")
    if not _REGISTRY_RE.fullmatch(registry):
        raise InitConflict(f"registry {registry!r} has characters a workflow cannot carry unquoted")
    if not gpu_runner or not all(_LABEL_RE.fullmatch(label) for label in gpu_runner):
        raise InitConflict(f"GPU runner labels {','.join(gpu_runner)!r}: use letters, digits, '.', '_' and '-'")
    if not _LABEL_RE.fullmatch(branch):
        raise InitConflict(f"branch {branch!r}: use letters, digits, '.', '_' and '-'")
    values = {
        "spec": spec,
        "spec_dir": spec.rsplit("/", 1)[0] if "/" in spec else ".",
        "registry": registry,
        "gpu_runner": "[" + ", ".join(gpu_runner) + "]",
        "branch": branch,
        "python": python,
        "kiln": source.requirement(),
        "kiln_quantize": source.requirement(QUANTIZE_EXTRA),
        "torch": TORCH_PIN,
        "uses": pinned_uses(),
        "sign": sign,
        "sign_flag": " --keyless" if sign else "",
    }
    env = _environment()
    out = {name: env.get_template(template).render(values) for name, template in WORKFLOWS.items()}
    if values["spec_dir"] == ".":  # the spec sits at the repository root: any change may touch it
        out = {name: text.replace('      - "./**"\n', '      - "**"\n') for name, text in out.items()}
    return out


def loopback_host(registry: str) -> str | None:
    """The host of `registry` (host[:port][/namespace]) when it is a loopback address (127.0.0.0/8,
    ::1, localhost): a CI runner reaching it reaches itself, not the machine that ran `kiln init`."""
    import ipaddress

    host = registry.split("/", 1)[0]
    if host.startswith("["):
        host = host[1:].split("]", 1)[0]
    elif host.count(":") == 1:
        host = host.split(":", 1)[0]
    name = host.lower().rstrip(".")
    if name == "localhost" or name.endswith(".localhost"):
        return host
    try:
        return host if ipaddress.ip_address(name).is_loopback else None
    except ValueError:
        return None


def install_workflows(root: Path, spec: Path, source: KilnSource, *, registry: str | None = None,
                      force: bool = False, gpu_runner: tuple[str, ...] = DEFAULT_GPU_RUNNER,
                      branch: str = "main", sign: bool = True, warn=lambda message: None) -> list[tuple[Path, str]]:
    """Write the workflows under root/.github/workflows and `.kiln/` into root/.gitignore;
    [(path, "wrote"|"unchanged"|"replaced")]. `warn` is told what the workflows will not do as
    the user may expect (a loopback registry)."""
    if not TEMPLATES.is_dir():
        raise InitConflict(f"the CI templates are not installed ({TEMPLATES} is missing)")
    if not spec.is_file():
        raise InitConflict(f"no such file: {spec}")
    try:
        rel = spec.resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        raise InitConflict(f"{spec} is not inside {root}") from None
    from compiler.pipeline import validate_path

    validated = validate_path(spec)
    if registry is None:
        parsed = validated.spec
        if parsed is None or parsed.publish is None:
            raise InitConflict(f"{spec} has no publish.registry: set it or pass --registry")
        registry = parsed.publish.registry
    hosts = validated.resolved.hosts.values() if validated.resolved is not None else ()
    texts = render_workflows(rel, registry, source, gpu_runner=gpu_runner, branch=branch, sign=sign)
    host = loopback_host(registry)
    if host is not None:
        warn(f"the workflows publish to and cache from {registry}, but {host} is a loopback address: on a CI "
             "runner it is the runner itself, not this machine; pass --registry (or set publish.registry) to a "
             "registry the runners can reach")
    target = root / ".github" / "workflows"
    files = {target / name: text for name, text in texts.items()}
    labels = tuple(dict.fromkeys(gpu_runner + tuple(runner_label(h.gpu.name) for h in hosts if h.gpu is not None)))
    files[root / ".github" / ACTIONLINT_CONFIG] = actionlint_config(labels)
    files[root / ".github" / BUILDERS_FILE] = builders_text(hosts, gpu_runner)
    plan = []
    for path, text in files.items():
        old = path.read_text(encoding="utf-8") if path.is_file() else None
        if old is not None and old != text and not force:
            raise InitConflict(f"{path} exists and differs; pass --force to replace it")
        plan.append((path, text, "unchanged" if old == text else "replaced" if old is not None else "wrote"))
    ignore = root / ".gitignore"
    old_ignore = ignore.read_text(encoding="utf-8") if ignore.is_file() else None
    new_ignore = with_store_ignored(old_ignore)
    if new_ignore != old_ignore:
        plan.append((ignore, new_ignore, "wrote" if old_ignore is None else "updated"))
    target.mkdir(parents=True, exist_ok=True)
    for path, text, state in plan:  # checked all first: nothing half-written
        if state != "unchanged":
            tmp = path.with_name(path.name + ".tmp")
            tmp.write_text(text, encoding="utf-8")
            tmp.replace(path)
    return [(path, state) for path, _, state in plan]


_STORE_PATTERNS = {".kiln", ".kiln/", "/.kiln", "/.kiln/", "**/.kiln", "**/.kiln/"}


def with_store_ignored(gitignore: str | None) -> str:
    """The .gitignore text with `.kiln/` (the default store and build outputs, at any depth) in it."""
    text = gitignore or ""
    if any(line.strip() in _STORE_PATTERNS for line in text.splitlines()):
        return text
    if text and not text.endswith("\n"):
        text += "\n"
    return text + "# Kiln's local store and outputs (kiln init)\n.kiln/\n"
