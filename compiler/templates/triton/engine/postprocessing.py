"""Kiln's postprocessing model: token ids from the TensorRT-LLM backend -> text, one string per
beam. Runs in Triton's Python backend with the checkpoint's tokenizer (parameter `tokenizer_dir`,
relative to this model's directory). Written for kiln (not derived from tensorrtllm_backend).

The backend is configured with exclude_input_in_output, so `output_ids` holds generated tokens
only: [batch, beams, tokens], of which the first `sequence_length` [batch, beams] are valid.
"""

import json
import os

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        from transformers import AutoTokenizer

        config = json.loads(args["model_config"])
        where = os.path.join(args["model_repository"], config["parameters"]["tokenizer_dir"]["string_value"])
        self.tokenizer = AutoTokenizer.from_pretrained(where)

    def _one(self, request):
        ids = pb_utils.get_input_tensor_by_name(request, "output_ids").as_numpy()
        lengths = pb_utils.get_input_tensor_by_name(request, "sequence_length").as_numpy()
        ids = ids.reshape(-1, ids.shape[-1])  # [beams, tokens]
        lengths = lengths.reshape(-1)
        if len(lengths) != len(ids):
            raise ValueError(f"output_ids has {len(ids)} beams but sequence_length {len(lengths)}")
        texts = [self.tokenizer.decode(beam[:max(int(n), 0)].tolist(), skip_special_tokens=True)
                 for beam, n in zip(ids, lengths)]
        out = np.array([[t.encode("utf-8") for t in texts]], dtype=np.object_)
        return pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("text", out)])

    def execute(self, requests):
        responses = []
        for request in requests:
            try:
                responses.append(self._one(request))
            except Exception as e:
                responses.append(pb_utils.InferenceResponse(error=pb_utils.TritonError(str(e))))
        return responses
