"""Kiln: a declarative compiler for LLM inference deployments on NVIDIA GPUs."""

__version__ = "0.1.0"
# The distribution's name (pyproject.toml's project.name; tests/test_gitops_ci.py checks they
# agree). The command stays `kiln`; the name `kiln` on the public index is another project.
DISTRIBUTION = "kiln-compiler"
