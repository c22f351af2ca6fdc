"""Who signs a keyless release: the identity GitHub's OIDC issuer gives the run of a repository's
release workflow, which Fulcio puts in the signing certificate (its SAN URI). One definition for
the verifier (compiler/gitops/signing.py) and the cluster's admission policy
(compiler/targets/kubernetes/admission.py). A leaf module: it imports nothing of the compiler."""

from __future__ import annotations

GITHUB_ISSUER = "https://token.actions.githubusercontent.com"
RELEASE_WORKFLOW = ".github/workflows/kiln-release.yml"  # the file `kiln init` writes (compiler/gitops/ci.py)


def release_identity(repository: str, ref: str, workflow: str = RELEASE_WORKFLOW) -> str:
    """https://github.com/<owner>/<name>/<workflow path>@<ref>: the job_workflow_ref claim as a URI."""
    return f"https://github.com/{repository}/{workflow}@{ref}"
