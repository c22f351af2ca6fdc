"""Kiln's postprocessing model: token ids from the TensorRT-LLM backend -> text, one string per
beam. Runs in Triton's Python backend with the checkpoint's tokenizer (parameter `tokenizer_dir`,
relative to this model's directory). Written for kiln (not derived from tensorrtllm_backend).

The backend is configured with exclude_input_in_output, so `output_ids` holds generated tokens
only: [batch, beams, tokens], of which the first `sequence_length` [batch, beams] are valid.

Streaming (the BLS's incremental detokenizer): with the optional `prefix_length`, the first that
many valid tokens are context only, decoded so that the text answered is what the rest adds to
them. A token is not always a whole character (byte-level BPE splits "🙂" over several tokens, a
byte-fallback token is one byte), so text decoded from a window of tokens alone may end in, or
start with, U+FFFD; the caller holds such a tail back until the following tokens complete it.
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

    def _decode(self, ids: list, skip: int) -> str:
        text = self.tokenizer.decode(ids, skip_special_tokens=True)
        if skip <= 0:
            return text
        context = self.tokenizer.decode(ids[:skip], skip_special_tokens=True)
        # the context's text is a prefix of the whole for the tokenizers Kiln serves; if a
        # normalizer ever breaks that, answer the whole window rather than a wrong cut
        return text[len(context):] if text.startswith(context) else text

    def _one(self, request):
        ids = pb_utils.get_input_tensor_by_name(request, "output_ids").as_numpy()
        lengths = pb_utils.get_input_tensor_by_name(request, "sequence_length").as_numpy()
        ids = ids.reshape(-1, ids.shape[-1])  # [beams, tokens]
        lengths = lengths.reshape(-1)
        if len(lengths) != len(ids):
            raise ValueError(f"output_ids has {len(ids)} beams but sequence_length {len(lengths)}")
        prefix = pb_utils.get_input_tensor_by_name(request, "prefix_length")
        skip = 0 if prefix is None else max(int(prefix.as_numpy().reshape(-1)[0]), 0)
        texts = [self._decode(beam[:max(int(n), 0)].tolist(), skip) for beam, n in zip(ids, lengths)]
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
