"""Kiln's BLS model: the ensemble's pipeline (preprocessing -> tensorrt_llm -> postprocessing) driven
from Python, for clients that want one model with streaming and per-request error messages.
Written for kiln (not derived from tensorrtllm_backend). The three model names come from the
parameters, so one repository can hold the pipelines of several models.

Requests of one batch run concurrently in threads: each waits on the engine, and the engine
batches them in flight. When the model is decoupled, `stream` asks for one response per step.
"""

import json
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import triton_python_backend_utils as pb_utils

# request input -> (model it goes to, that model's input name)
PRE_INPUTS = {"text_input": "text", "max_tokens": "max_tokens", "stop_words": "stop_words",
              "bad_words": "bad_words", "end_id": "end_id", "pad_id": "pad_id"}
ENGINE_INPUTS = {"top_k": "runtime_top_k", "top_p": "runtime_top_p", "temperature": "temperature",
                 "repetition_penalty": "repetition_penalty", "presence_penalty": "presence_penalty",
                 "frequency_penalty": "frequency_penalty", "seed": "seed", "beam_width": "beam_width",
                 "stream": "streaming"}
# preprocessing output -> engine input
PRE_TO_ENGINE = {"input_ids": "input_ids", "input_lengths": "input_lengths",
                 "request_output_len": "request_output_len", "stop_words_list": "stop_words_list",
                 "bad_words_list": "bad_words_list", "out_end_id": "end_id", "out_pad_id": "pad_id"}


class StepFailed(Exception):
    pass


def _tensor(source, name: str, as_name: str):
    tensor = pb_utils.get_input_tensor_by_name(source, name)
    return None if tensor is None else pb_utils.Tensor(as_name, tensor.as_numpy())


def _check(response, model: str):
    if response.has_error():
        raise StepFailed(f"{model}: {response.error().message()}")
    return response


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        p = {k: v["string_value"] for k, v in config["parameters"].items()}
        self.pre, self.engine, self.post = p["preprocessing_model"], p["tensorrt_llm_model"], p["postprocessing_model"]
        self.decoupled = pb_utils.using_decoupled_model_transaction_policy(config)
        self.pool = ThreadPoolExecutor(max_workers=max(int(config.get("max_batch_size") or 1), 1))

    def _call(self, model: str, inputs: list, outputs: list):
        request = pb_utils.InferenceRequest(model_name=model, inputs=inputs, requested_output_names=outputs)
        return _check(request.exec(), model)

    def _text(self, engine_response) -> np.ndarray:
        inputs = [pb_utils.Tensor(n, pb_utils.get_output_tensor_by_name(engine_response, n).as_numpy())
                  for n in ("output_ids", "sequence_length")]
        post = self._call(self.post, inputs, ["text"])
        return pb_utils.get_output_tensor_by_name(post, "text").as_numpy()

    def _run(self, request, send):
        pre_inputs = [t for t in (_tensor(request, k, v) for k, v in PRE_INPUTS.items()) if t is not None]
        pre = self._call(self.pre, pre_inputs, list(PRE_TO_ENGINE))
        inputs = [pb_utils.Tensor(dst, pb_utils.get_output_tensor_by_name(pre, src).as_numpy())
                  for src, dst in PRE_TO_ENGINE.items()]
        inputs += [t for t in (_tensor(request, k, v) for k, v in ENGINE_INPUTS.items()) if t is not None]
        call = pb_utils.InferenceRequest(model_name=self.engine, inputs=inputs,
                                         requested_output_names=["output_ids", "sequence_length"])
        if not self.decoupled:
            send(self._text(_check(call.exec(), self.engine)))
            return
        for response in call.exec(decoupled=True):
            _check(response, self.engine)
            if pb_utils.get_output_tensor_by_name(response, "output_ids") is not None:
                send(self._text(response))

    @staticmethod
    def _response(text=None, error=None):
        if error is not None:
            return pb_utils.InferenceResponse(error=pb_utils.TritonError(error))
        return pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("text_output", text)])

    def _decoupled(self, request):
        sender = request.get_response_sender()
        try:
            self._run(request, lambda text: sender.send(self._response(text)))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        except Exception as e:
            sender.send(self._response(error=str(e)), flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)

    def _single(self, request):
        texts = []
        try:
            self._run(request, texts.append)
            return self._response(texts[-1])
        except Exception as e:
            return self._response(error=str(e))

    def execute(self, requests):
        if self.decoupled:
            for request in requests:
                self.pool.submit(self._decoupled, request)
            return None
        return list(self.pool.map(self._single, requests))

    def finalize(self):
        self.pool.shutdown(wait=True)
