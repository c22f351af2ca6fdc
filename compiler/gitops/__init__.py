"""The GitOps loop: a spec's revisions in git, the semantic plan between two of them, publishing to an
OCI registry (which doubles as a shared build cache) and the provenance of each release."""
