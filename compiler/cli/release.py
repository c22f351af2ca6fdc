"""`kiln publish` (artifacts, release manifest and provenance to an OCI registry) and `kiln init`
(the CI workflows): the release half of the GitOps loop (compiler/gitops)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .common import STORE_HELP, check_output_file, require_file, store_path, write_output
from .errors import UsageError
from .exitcodes import ExitCode
from .output import print_diagnostics


def register(sub: argparse._SubParsersAction) -> None:
    pub = sub.add_parser("publish", help="push the built artifacts, the release manifest and its provenance "
                                         "to an OCI registry")
    pub.add_argument("spec", type=Path, metavar="SPEC")
    pub.add_argument("--registry", help="registry and namespace, e.g. 127.0.0.1:5000/inference "
                                        "(default: the spec's publish.registry)")
    pub.add_argument("--store", type=Path, help=STORE_HELP)
    pub.add_argument("--commit", help="git commit to tag the release with (default: the spec repository's HEAD)")
    pub.add_argument("--artifacts-only", action="store_true",
                     help="push the artifacts the store holds and no release (CI jobs that build part of a graph)")
    pub.add_argument("--provenance", type=Path, metavar="FILE", help="also write the provenance statement here")
    pub.add_argument("--release-ref", type=Path, metavar="FILE",
                     help="also write the reference of the release it pushed here (host/namespace/name:tag, one "
                          "line, what kiln verify takes)")
    pub.add_argument("--allow-dirty", action="store_true",
                     help="publish although an input of the release differs from the commit (or lies outside "
                          "the repository), under the tag "
                          "dirty-<commit>-<release digest> instead of the commit's (which only ever names what the "
                          "commit builds)")
    sign = pub.add_mutually_exclusive_group()
    sign.add_argument("--sign-key", type=Path, metavar="KEY",
                      help="sign every artifact (OpenSSF model-signing format) and the release's SLSA provenance "
                           "with this EC P-256 private key (PEM), and attach the signatures as OCI referrers")
    sign.add_argument("--keyless", action="store_true",
                      help="sign as --sign-key does, keyless through Sigstore with the CI's OIDC identity "
                           "(the release workflow's id-token: write)")
    pub.set_defaults(handler=cmd_publish)

    ver = sub.add_parser("verify", help="check a published release's signatures, signer and every digest "
                                        "against the registry")
    ver.add_argument("release", metavar="RELEASE", help="host[:port]/namespace/name:tag, as kiln publish prints it")
    ver.add_argument("--spec", type=Path, help="take the trusted signer from this spec's publish.signed_by")
    ver.add_argument("--key", type=Path, metavar="PUBLIC_KEY", help="trust this EC public key (PEM)")
    ver.add_argument("--repository", metavar="OWNER/NAME",
                     help="trust keyless signatures of this GitHub repository's release workflow")
    ver.add_argument("--ref", default="refs/heads/main", help="the git ref the workflow ran on (default: refs/heads/main)")
    ver.set_defaults(handler=cmd_verify)

    ini = sub.add_parser("init", help="install the CI workflows (validate, plan comment, build and publish)")
    ini.add_argument("spec", type=Path, metavar="SPEC", help="the spec the workflows build, relative to the repository")
    ini.add_argument("--example", action="store_true",
                     help="instead: write a commented starter spec to SPEC (which must not exist) and stop")
    ini.add_argument("--dir", type=Path, help="the repository root (default: the root of the spec's git repository)")
    ini.add_argument("--registry", help="registry the workflows publish to and cache from "
                                        "(default: the spec's publish.registry)")
    ini.add_argument("--gpu-runner", default="self-hosted,linux,gpu", metavar="LABELS",
                     help="runner labels of the GPU jobs, comma-separated (default: self-hosted,linux,gpu)")
    ini.add_argument("--branch", default="main", help="the branch whose merges release (default: main)")
    ini.add_argument("--force", action="store_true", help="overwrite workflow files that differ")
    ini.add_argument("--no-sign", action="store_true",
                     help="publish unsigned (default: every job that publishes signs keyless through Sigstore, "
                          "which logs the workflow's identity in the public Rekor log)")
    ini.add_argument("--kiln-repo", metavar="URL",
                     help="https:// or ssh:// URL of the Kiln repository the workflows install Kiln from "
                          "(default: the one this Kiln was installed from, or its checkout's origin)")
    ini.add_argument("--kiln-commit", metavar="COMMIT",
                     help="full commit id of Kiln the workflows install (default: this Kiln's)")
    ini.set_defaults(handler=cmd_init)


def _release_commit(args: argparse.Namespace, inputs: list[Path]) -> tuple[str, bool]:
    """(commit, dirty): the commit to tag (--commit or HEAD) and whether any input of the release
    (`inputs`, and the spec's directory) differs from it. Outside a git repository --commit is taken
    on trust (and dirty is False)."""
    from compiler.gitops.gitrev import GitError, changes_since, repo_root, resolve_ref

    try:
        repo_root(args.spec)
    except GitError as e:
        if args.commit is None:
            raise UsageError(f"cannot tag the release: {e}; pass --commit") from None
        return args.commit, False
    try:
        commit = resolve_ref(args.spec, args.commit or "HEAD")  # the full id, also for --commit HEAD
        changed, outside = changes_since(args.spec, commit, inputs)
    except GitError as e:
        raise UsageError(f"cannot tag the release: {e}") from None
    if (changed or outside) and not args.allow_dirty:
        problems = []
        if changed:
            problems.append(f"the release of {args.spec} differs from commit {commit[:12]} ({_listed(changed)})")
        if outside:
            problems.append(f"it reads files outside the repository, which no commit pins ({_listed(outside)})")
        raise DirtyCheckout("; ".join(problems) + ": a release is tagged with the commit that builds it; commit "
                            "the changes first, or pass --allow-dirty to publish under a dirty-... tag")
    return commit, bool(changed or outside)


def _listed(paths: list[str]) -> str:
    from compiler.gitops.oci import printable

    return ", ".join(printable(p, 200) for p in paths[:5]) + (f" and {len(paths) - 5} more" if len(paths) > 5 else "")


def _release_inputs(spec: Path, validation) -> list[Path]:
    """Every file the release reads besides the spec's directory: the spec, its lock file, and each
    input path resolution confined (model directories, data, tune records, architecture configs)."""
    from compiler.ir.lockfile import lock_path

    paths = [spec, lock_path(spec)]
    resolved = validation.resolved
    if resolved is not None:
        paths += [i.path for i in resolved.inputs.values()]
    return paths


class DirtyCheckout(Exception):
    pass


def cmd_publish(args: argparse.Namespace) -> ExitCode:
    from compiler.build import open_store
    from compiler.gitops.oci import RegistryError
    from compiler.gitops.publish import NotBuilt, TagConflict, publish_spec

    from compiler.pipeline import validate_path

    require_file(args.spec)
    check_output_file(args.provenance, "--provenance")
    check_output_file(args.release_ref, "--release-ref")
    if args.artifacts_only and args.release_ref is not None:
        raise UsageError("--release-ref names the release pushed, and --artifacts-only pushes none")
    validation = validate_path(args.spec)  # a spec with errors is the first thing to fix
    if not validation.ok:
        print_diagnostics([validation], stream=sys.stderr)
        return ExitCode.ERRORS
    commit, dirty = None, False
    if not args.artifacts_only:
        try:
            commit, dirty = _release_commit(args, _release_inputs(args.spec, validation))
        except DirtyCheckout as e:
            print(f"kiln: error: {e}", file=sys.stderr)
            return ExitCode.ERRORS
    store = open_store(store_path(args.store, args.spec), create=False)
    from compiler.gitops.signing import SignatureError

    try:
        signer = _signer(args)
        outcome = publish_spec(args.spec, store, args.registry, commit, artifacts_only=args.artifacts_only,
                               dirty=dirty, signer=signer)
    except (NotBuilt, TagConflict, SignatureError) as e:  # TagRaced among them: another publish won the tag
        print(f"kiln: error: {e}", file=sys.stderr)
        return ExitCode.ERRORS
    except RegistryError as e:
        print(f"kiln: error: registry: {e}", file=sys.stderr)
        return ExitCode.ERRORS
    if outcome.validation is not None and not outcome.validation.ok:
        print_diagnostics([outcome.validation], stream=sys.stderr)
        return ExitCode.ERRORS
    if args.provenance is not None and outcome.provenance is not None:
        write_output(args.provenance, outcome.provenance, "--provenance")
    if args.release_ref is not None and outcome.release_ref is not None:
        write_output(args.release_ref, f"{outcome.release_ref}\n".encode(), "--release-ref")
    print(outcome.summary())
    return ExitCode.OK


def _signer(args: argparse.Namespace):
    if args.sign_key is None and not args.keyless:
        return None
    from compiler.gitops.signing import Signer

    if args.sign_key is not None:
        require_file(args.sign_key)
        return Signer(args.sign_key)
    return Signer()


def cmd_verify(args: argparse.Namespace) -> ExitCode:
    from compiler.gitops.attest import parse_release, verify_release
    from compiler.gitops.oci import Client, RegistryError
    from compiler.gitops.signing import SignatureError, Trust, trust_of

    if sum(x is not None for x in (args.spec, args.key, args.repository)) != 1:
        raise UsageError("name the trusted signer once: --key PUBLIC_KEY, --repository OWNER/NAME, or --spec SPEC "
                         "(its publish.signed_by)")
    if args.spec is not None:
        from compiler.pipeline import validate_path

        require_file(args.spec)
        validation = validate_path(args.spec)
        if not validation.ok:
            print_diagnostics([validation], stream=sys.stderr)
            return ExitCode.ERRORS
        publish = validation.spec.publish
        if publish is None or publish.signed_by is None:
            raise UsageError(f"{args.spec} has no publish.signed_by: pass --key or --repository")
        trust = trust_of(publish.signed_by, args.spec.parent)
    elif args.key is not None:
        require_file(args.key)
        trust = Trust(key=args.key)
    else:
        trust = Trust(repository=args.repository, ref=args.ref)
    try:
        registry, name, tag = parse_release(args.release)
        result = verify_release(Client(registry), registry, name, tag, trust)
    except SignatureError as e:
        print(f"kiln: error: {args.release}: {e}", file=sys.stderr)
        return ExitCode.ERRORS
    except RegistryError as e:
        print(f"kiln: error: registry: {e}", file=sys.stderr)
        return ExitCode.ERRORS
    print(result.summary())
    print(f"signed by {trust.describe()}")
    return ExitCode.OK


def _write_example(spec: Path) -> ExitCode:
    """`kiln init --example SPEC`: the starter spec (compiler/templates/starter), then the next steps."""
    from compiler.spec.starter import write_starter

    try:
        spec.parent.mkdir(parents=True, exist_ok=True)  # `deploy/kiln.yaml` in a fresh repository
        write_starter(spec)
    except FileExistsError:
        raise UsageError(f"{spec} exists; --example writes a new file only (pick another name)") from None
    except OSError as e:
        raise UsageError(f"cannot write {str(spec)[:200]}: {e.strerror or e}") from None
    print(f"wrote {spec}: one model on one GPU, with comments")
    print(f"next: kiln validate {spec}, then kiln plan {spec}; once it is in a git repository, "
          f"kiln init {spec} installs the CI workflows")
    return ExitCode.OK


def cmd_init(args: argparse.Namespace) -> ExitCode:
    from compiler.gitops.ci import InitConflict, install_workflows
    from compiler.gitops.gitrev import GitError, repo_root
    from compiler.gitops.kilnsource import SourceError, resolve_source

    if args.example:
        return _write_example(args.spec)
    require_file(args.spec)
    root = args.dir
    if root is None:  # the workflows belong at the repository's root, wherever kiln runs from
        try:
            root = repo_root(args.spec)
        except GitError as e:
            raise UsageError(f"{args.spec} is not in a git repository ({e}): run `git init` there, "
                             "or pass --dir") from None
    try:
        source = resolve_source(args.kiln_repo, args.kiln_commit)
    except SourceError as e:
        raise UsageError(str(e)) from None
    try:
        labels = tuple(label.strip() for label in args.gpu_runner.split(",") if label.strip())
        written = install_workflows(root, args.spec, source, registry=args.registry, force=args.force,
                                    gpu_runner=labels, branch=args.branch, sign=not args.no_sign,
                                    warn=lambda message: print(f"kiln: warning: {message}", file=sys.stderr))
    except InitConflict as e:
        raise UsageError(str(e)) from None
    for path, state in written:
        print(f"{state}: {path}")
    print(f"the workflows install {source.requirement()}")
    return ExitCode.OK
