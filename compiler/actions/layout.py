"""Where serving artifacts sit inside a serving image, and which action makes a model's checkpoint.

Shared by the Triton repository (whose model.yaml and parameters point at checkpoint paths), the
image (which copies trees to these paths) and the entrypoint, so the three cannot disagree.
"""

from __future__ import annotations

IMAGE_ROOT = "/opt/kiln"
REPOSITORY_DIR = f"{IMAGE_ROOT}/repository"  # the Triton model repository of one host


def model_dir(model: str) -> str:
    """The checkpoint (or engine) directory of one model inside the image."""
    return f"{IMAGE_ROOT}/models/{model}"


def checkpoint_action_id(spec, model: str) -> str:
    """The action whose output tree is the model's servable checkpoint: on the engine target the
    TensorRT engine (its tree holds engine/); on llmapi the ModelOpt export when the model is
    quantized, else the verified source files."""
    if spec.target == "engine":
        return f"engine/{model}"
    return f"quantize/{model}" if spec.models[model].quantization.quantized else f"model-source/{model}"
