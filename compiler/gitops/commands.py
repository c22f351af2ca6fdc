"""CLI handlers of the GitOps loop: `kiln plan --base/--matrix`, `kiln publish`, `kiln init`.

Exit codes beyond compiler.cli's: 5 = `kiln plan --base` found changes (0 = no change).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

EXIT_CHANGES = 5


def register(sub: argparse._SubParsersAction) -> None:
    pub = sub.add_parser("publish", help="push the built artifacts, the release manifest and its provenance "
                                         "to an OCI registry")
    pub.add_argument("spec", type=Path, metavar="SPEC")
    pub.add_argument("--registry", help="registry and namespace, e.g. 127.0.0.1:5000/inference "
                                        "(default: the spec's publish.registry)")
    pub.add_argument("--store", type=Path, help="store directory (default: $KILN_STORE or .kiln/store)")
    pub.add_argument("--commit", help="git commit to tag the release with (default: the spec repository's HEAD)")
    pub.add_argument("--artifacts-only", action="store_true",
                     help="push the artifacts the store holds and no release (CI jobs that build part of a graph)")
    pub.add_argument("--provenance", type=Path, metavar="FILE", help="also write the provenance statement here")
    pub.set_defaults(handler=cmd_publish)

    ini = sub.add_parser("init", help="install the CI workflows (validate, plan comment, build and publish)")
    ini.add_argument("spec", type=Path, metavar="SPEC", help="the spec the workflows build, relative to the repository")
    ini.add_argument("--dir", type=Path, default=Path("."), help="the repository root (default: .)")
    ini.add_argument("--registry", help="registry the workflows publish to and cache from "
                                        "(default: the spec's publish.registry)")
    ini.add_argument("--gpu-runner", default="self-hosted,linux,gpu", metavar="LABELS",
                     help="runner labels of the GPU jobs, comma-separated (default: self-hosted,linux,gpu)")
    ini.add_argument("--branch", default="main", help="the branch whose merges release (default: main)")
    ini.add_argument("--force", action="store_true", help="overwrite workflow files that differ")
    ini.set_defaults(handler=cmd_init)


def add_plan_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--base", metavar="REF", help="compare with the spec at this git revision (exit 5 on changes)")
    p.add_argument("--matrix", action="store_true",
                   help="print only the GitHub Actions job matrix of the actions left to build that this "
                        "builder cannot run (a GPU, or what $KILN_BUILDER_HAS leaves out)")
    p.add_argument("--cache", metavar="REGISTRY", help="count artifacts in this registry cache as built")


def cmd_plan(args: argparse.Namespace) -> int:
    """`kiln plan` with --base or --matrix (plain `kiln plan` stays in compiler.commands)."""
    from compiler.build import open_store, plan_spec, store_dir
    from compiler.cli import UsageError, emit
    from compiler.diagnostics.render import render_text, summary_line
    from compiler.gitops.cache import remote_for
    from compiler.gitops.gitrev import GitError
    from compiler.gitops.planbase import plan_against
    from compiler.gitops.render import render_semantic
    from compiler.gitops.semplan import builder_lacks, job_matrix
    from compiler.pipeline import Options

    if not args.spec.is_file():
        raise UsageError(f"no such file: {args.spec}")
    if args.base is None and not args.matrix:
        raise UsageError("--cache goes with --base or --matrix")
    store = open_store(store_dir(args.store))
    remote = remote_for(args.cache, store) if args.cache else None
    has_remote = remote.has if remote is not None else (lambda key, kind: False)
    options = Options(gpu_profiles=args.gpu_profiles)
    if args.base is None:  # --matrix against the store (and the registry cache)
        outcome = plan_spec(args.spec, store, options)
        if outcome.graph is None:
            _print_errors(outcome.validation)
            return 1
        todo = [p for p in outcome.plan if not p.cached and not has_remote(p.key, p.kind)]
        emit(json.dumps(job_matrix(todo, outcome.graph, builder_lacks()), sort_keys=True, separators=(",", ":")), None)
        return 0
    try:
        result = plan_against(args.spec, args.base, store, options, has_remote)
    except GitError as e:
        raise UsageError(f"--base {args.base}: {e}") from None
    if result.plan is None:
        _print_errors(result.head)
        return 1
    if args.matrix:  # output for a workflow step: the exit code says nothing about changes
        emit(json.dumps(result.plan.matrix, sort_keys=True, separators=(",", ":")), None)
        return 0
    text = render_semantic(result.plan, args.format)
    head = result.head
    if head.diagnostics and args.format != "json":  # warnings of the new revision stay visible
        text = render_text(head.diagnostics, {head.file: head.document.text}) + "\n\n" + text
    if args.format == "text":
        text += f"\n\n{head.file}: {summary_line(head.diagnostics)}"
    emit(text, None)
    return EXIT_CHANGES if result.plan.changed else 0


def _print_errors(result) -> None:
    from compiler.diagnostics.render import render_text, summary_line

    sources = {result.file: result.document.text} if result.document else {}
    print(render_text(result.diagnostics, sources), file=sys.stderr)
    print(f"{result.file}: {summary_line(result.diagnostics)}", file=sys.stderr)


def cmd_publish(args: argparse.Namespace) -> int:
    from compiler.build import open_store, store_dir
    from compiler.cli import UsageError
    from compiler.gitops.gitrev import GitError, head_commit
    from compiler.gitops.oci import RegistryError
    from compiler.gitops.publish import NotBuilt, publish_spec

    if not args.spec.is_file():
        raise UsageError(f"no such file: {args.spec}")
    commit = args.commit
    if commit is None and not args.artifacts_only:
        try:
            commit = head_commit(args.spec)
        except GitError as e:
            raise UsageError(f"cannot tag the release: {e}; pass --commit") from None
    store = open_store(store_dir(args.store))
    try:
        outcome = publish_spec(args.spec, store, args.registry, commit, artifacts_only=args.artifacts_only)
    except NotBuilt as e:
        print(f"kiln: error: {e}", file=sys.stderr)
        return 1
    except RegistryError as e:
        print(f"kiln: error: registry: {e}", file=sys.stderr)
        return 1
    if outcome.validation is not None and not outcome.validation.ok:
        _print_errors(outcome.validation)
        return 1
    if args.provenance is not None and outcome.provenance is not None:
        from compiler.cli import emit
        args.provenance.parent.mkdir(parents=True, exist_ok=True)
        emit(outcome.provenance.decode("utf-8"), args.provenance)
    print(outcome.summary())
    return 0


def cmd_init(args: argparse.Namespace) -> int:
    from compiler.cli import UsageError
    from compiler.gitops.ci import InitConflict, install_workflows

    try:
        labels = tuple(label.strip() for label in args.gpu_runner.split(",") if label.strip())
        written = install_workflows(args.dir, args.spec, registry=args.registry, force=args.force,
                                    gpu_runner=labels, branch=args.branch)
    except InitConflict as e:
        raise UsageError(str(e)) from None
    for path, state in written:
        print(f"{state}: {path}")
    return 0
