"""Serving artifacts: Triton model repositories rendered from the spec, and the checks that prove
them against Triton's own configuration schema and rules."""
