"""Where serving artifacts sit inside a serving image.

Shared by the Triton repository (whose model.yaml and parameters point at checkpoint paths), the
image (which copies trees to these paths), the entrypoint and the engine action (which writes its
engine under ENGINE_SUBDIR of its artifact), so none of them can disagree.
"""

from __future__ import annotations

IMAGE_ROOT = "/opt/kiln"
REPOSITORY_DIR = f"{IMAGE_ROOT}/repository"  # the Triton model repository of one host
ENGINE_SUBDIR = "engine"  # inside an engine artifact: config.json and rank<N>.engine
LLMAPI_OPTIONS = "llm-api-options.yaml"  # a model's LLM-API options file (llmapi-options/<model>)
MODELS_DIR = f"{IMAGE_ROOT}/models"  # <model>/: each model's checkpoint or engine artifact
OPTIONS_DIR = f"{IMAGE_ROOT}/llmapi"  # <model>/llm-api-options.yaml in the image: trtllm-serve --extra_llm_api_options


def model_dir(model: str) -> str:
    """The checkpoint (or engine artifact) directory of one model inside the image."""
    return f"{MODELS_DIR}/{model}"


def engine_dir(model: str) -> str:
    """The directory the TensorRT-LLM backend loads (`gpt_model_path`): the one holding the engine's
    config.json, which the engine action writes under ENGINE_SUBDIR of the artifact copied to model_dir."""
    return f"{model_dir(model)}/{ENGINE_SUBDIR}"


ENGINE_PARTS = ("preprocessing", "tensorrt_llm", "postprocessing", "bls")  # the ensemble is named <model>


def engine_names(model: str) -> dict[str, str]:
    """Triton model names of one model's engine pipeline: the ensemble carries the model's own name
    (the host script loads it with --load-model=<model>, which loads its steps too)."""
    return {"ensemble": model, **{part: f"{model}-{part}" for part in ENGINE_PARTS}}
