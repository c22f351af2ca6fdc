"""Where serving artifacts sit inside a serving image.

Shared by the Triton repository (whose model.yaml and parameters point at checkpoint paths), the
image (which copies trees to these paths) and the entrypoint, so the three cannot disagree.
"""

from __future__ import annotations

IMAGE_ROOT = "/opt/kiln"
REPOSITORY_DIR = f"{IMAGE_ROOT}/repository"  # the Triton model repository of one host


def model_dir(model: str) -> str:
    """The checkpoint (or engine) directory of one model inside the image."""
    return f"{IMAGE_ROOT}/models/{model}"
