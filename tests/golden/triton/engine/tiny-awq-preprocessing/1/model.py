"""Kiln's preprocessing model: a prompt and its request options -> the token tensors the TensorRT-LLM
backend reads. Runs in Triton's Python backend; the tokenizer is the checkpoint's own, copied into
this model's directory by the build (parameter `tokenizer_dir`, relative to the model directory).

Written for kiln (not derived from tensorrtllm_backend). Tensor layouts are the backend's:
token ids INT32 [batch, tokens]; word lists INT32 [batch, 2, n], row 0 the concatenated ids of
every word, row 1 the end offset of each word, padded with 0 and -1 respectively.

`stream` reaches this model only from the ensemble, which does not stream: each engine response
would reach the postprocessing step alone (no request to key a detokenizer's state by, no end to
flush it at), and a character split over two responses would come out as U+FFFD. A request asking
for it is refused with the name of the BLS model (parameter `streaming_model`), which streams with
an incremental detokenizer. Upstream's ensemble decodes each response alone and its maintainers
answer the resulting mojibake with the BLS (tensorrtllm_backend#196, #606: `accumulate_tokens`).
"""

import json
import os

import numpy as np
import triton_python_backend_utils as pb_utils


def _param(config: dict, key: str) -> str:
    return config["parameters"][key]["string_value"]


def _strings(request, name: str) -> list:
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    if tensor is None:
        return []
    out = []
    for item in tensor.as_numpy().reshape(-1):
        text = item.decode("utf-8") if isinstance(item, bytes) else str(item)
        if text:
            out.append(text)
    return out


def _scalar(request, name: str, default):
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    return default if tensor is None else tensor.as_numpy().reshape(-1)[0].item()


def word_list(words: list) -> np.ndarray:
    """[[ids...], ...] -> the backend's [1, 2, n] layout (an empty list stays a valid tensor)."""
    ids, offsets, end = [], [], 0
    for word in words:
        ids.extend(word)
        end += len(word)
        offsets.append(end)
    n = max(len(ids), len(offsets), 1)
    out = np.zeros((1, 2, n), dtype=np.int32)
    out[0, 1, :] = -1
    out[0, 0, :len(ids)] = ids
    out[0, 1, :len(offsets)] = offsets
    return out


class RequestError(ValueError):
    """The client's request is wrong (answered as invalid argument, not as a server fault)."""


class TritonPythonModel:
    def initialize(self, args):
        from transformers import AutoTokenizer

        config = json.loads(args["model_config"])
        where = os.path.join(args["model_repository"], _param(config, "tokenizer_dir"))
        self.tokenizer = AutoTokenizer.from_pretrained(where)
        self.max_input_len = int(_param(config, "max_input_len"))
        self.streaming_model = _param(config, "streaming_model")
        eos = self.tokenizer.eos_token_id
        pad = self.tokenizer.pad_token_id
        self.end_id = -1 if eos is None else int(eos)
        self.pad_id = self.end_id if pad is None else int(pad)

    def _words(self, texts: list) -> list:
        return [self.tokenizer.encode(t, add_special_tokens=False) for t in texts]

    def _one(self, request):
        if bool(_scalar(request, "stream", False)):
            raise RequestError(f"stream: this ensemble answers whole texts only (it would decode each streamed "
                               f"response alone and split multi-byte characters); send streaming requests to "
                               f"model '{self.streaming_model}', which takes the same inputs")
        texts = _strings(request, "text")
        if len(texts) != 1:
            raise RequestError("text: expected one prompt per request")
        ids = self.tokenizer.encode(texts[0])
        if len(ids) > self.max_input_len:
            raise RequestError(f"the prompt has {len(ids)} tokens; this model accepts at most {self.max_input_len}")
        max_tokens = int(_scalar(request, "max_tokens", 0))
        if max_tokens < 1:
            raise RequestError("max_tokens must be at least 1")
        end_id = int(_scalar(request, "end_id", self.end_id))
        pad_id = int(_scalar(request, "pad_id", self.pad_id))
        tensors = [
            pb_utils.Tensor("input_ids", np.array([ids], dtype=np.int32)),
            pb_utils.Tensor("input_lengths", np.array([[len(ids)]], dtype=np.int32)),
            pb_utils.Tensor("request_output_len", np.array([[max_tokens]], dtype=np.int32)),
            pb_utils.Tensor("stop_words_list", word_list(self._words(_strings(request, "stop_words")))),
            pb_utils.Tensor("bad_words_list", word_list(self._words(_strings(request, "bad_words")))),
            pb_utils.Tensor("out_end_id", np.array([[end_id]], dtype=np.int32)),
            pb_utils.Tensor("out_pad_id", np.array([[pad_id]], dtype=np.int32)),
        ]
        return pb_utils.InferenceResponse(output_tensors=tensors)

    def execute(self, requests):
        responses = []
        for request in requests:
            try:
                responses.append(self._one(request))
            except RequestError as e:  # one bad request must not fail the others in the batch
                error = pb_utils.TritonError(str(e), pb_utils.TritonError.INVALID_ARG)
                responses.append(pb_utils.InferenceResponse(error=error))
            except Exception as e:
                responses.append(pb_utils.InferenceResponse(error=pb_utils.TritonError(str(e))))
        return responses
