"""Kiln: a declarative compiler for LLM inference deployments on NVIDIA GPUs."""

__version__ = "0.1.0"
