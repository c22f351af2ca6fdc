"""Kiln's LLM-API model: serves one model with TensorRT-LLM's LLM API (PyTorch backend) inside
Triton's Python backend. Written for kiln (not derived from tensorrtllm_backend).

`1/model.yaml` holds the LLM() arguments (the checkpoint path, parallelism, limits, KV cache,
scheduler); the tokenizer is the copy in this model's directory (parameter `tokenizer_dir`). This file binds the instance to its devices (parameter `gpu_device_ids`: one
comma-separated set per instance, ';' between instances; ordinals of the devices the container
sees) before TensorRT-LLM is imported, so CUDA only ever sees that set.

Requests of one Triton batch are submitted to the LLM together and batched in flight by it. When
the model is decoupled, each request streams its text (`stream`, default true) from a background
event loop and execute() returns at once; otherwise execute() waits for the whole batch.
"""

import asyncio
import json
import os
import re
import threading

import numpy as np
import triton_python_backend_utils as pb_utils


def _instance_index(name: str) -> int:
    """Triton names instances '<group>_<n>'; a single instance may have no suffix."""
    m = re.search(r"_(\d+)$", name or "")
    return int(m.group(1)) if m else 0


def _input(request, name: str, default=None):
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    return default if tensor is None else tensor.as_numpy().reshape(-1)


def _text(value) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        params = {k: v["string_value"] for k, v in config["parameters"].items()}
        sets = params["gpu_device_ids"].split(";")
        os.environ["CUDA_VISIBLE_DEVICES"] = sets[_instance_index(args.get("model_instance_name", "")) % len(sets)]

        from tensorrt_llm import LLM, SamplingParams
        import yaml  # after tensorrt_llm, which depends on it

        with open(os.path.join(args["model_repository"], params["llm_options"]), encoding="utf-8") as f:
            options = yaml.safe_load(f)
        # the repository's own tokenizer copy, wherever the repository is mounted
        options["tokenizer"] = os.path.join(args["model_repository"], params["tokenizer_dir"])
        self.SamplingParams = SamplingParams
        self.llm = LLM(**options)
        self.decoupled = pb_utils.using_decoupled_model_transaction_policy(config)
        if self.decoupled:
            self.loop = asyncio.new_event_loop()
            self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
            self.thread.start()

    def _sampling(self, request):
        kwargs = {"max_tokens": int(_input(request, "max_tokens")[0])}
        for name, cast in (("temperature", float), ("top_k", int), ("top_p", float), ("seed", int)):
            value = _input(request, name)
            if value is not None:
                kwargs[name] = cast(value[0])
        stop = [_text(s) for s in _input(request, "stop_words", [])]
        if stop:
            kwargs["stop"] = stop
        return self.SamplingParams(**kwargs)

    @staticmethod
    def _response(text: str, output) -> "pb_utils.InferenceResponse":
        done = output.outputs[0]
        tensors = [
            pb_utils.Tensor("text_output", np.array([[text.encode("utf-8")]], dtype=np.object_)),
            pb_utils.Tensor("finish_reason", np.array([[str(done.finish_reason or "").encode()]], dtype=np.object_)),
            pb_utils.Tensor("num_input_tokens", np.array([[len(output.prompt_token_ids or [])]], dtype=np.int32)),
            pb_utils.Tensor("num_output_tokens", np.array([[len(done.token_ids)]], dtype=np.int32)),
        ]
        return pb_utils.InferenceResponse(output_tensors=tensors)

    @staticmethod
    def _error(e: Exception):
        return pb_utils.InferenceResponse(error=pb_utils.TritonError(str(e)))

    async def _stream(self, request):
        sender = request.get_response_sender()
        try:
            prompt = _text(_input(request, "text_input")[0])
            stream = bool(_input(request, "stream", [True])[0])
            last = None
            async for output in self.llm.generate_async(prompt, self._sampling(request), streaming=stream):
                last = output
                if stream:
                    sender.send(self._response(output.outputs[0].text_diff, output))
            if not stream and last is not None:
                sender.send(self._response(last.outputs[0].text, last))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        except Exception as e:
            sender.send(self._error(e), flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)

    def execute(self, requests):
        if self.decoupled:
            for request in requests:
                asyncio.run_coroutine_threadsafe(self._stream(request), self.loop)
            return None
        pending = []
        for request in requests:
            try:
                if bool(_input(request, "stream", [False])[0]):
                    raise ValueError("this model is not decoupled: streaming is off (serving.streaming)")
                prompt = _text(_input(request, "text_input")[0])
                pending.append(self.llm.generate_async(prompt, self._sampling(request)))
            except Exception as e:
                pending.append(e)
        responses = []
        for item in pending:
            try:
                if isinstance(item, Exception):
                    raise item
                output = item.result()
                responses.append(self._response(output.outputs[0].text, output))
            except Exception as e:
                responses.append(self._error(e))
        return responses

    def finalize(self):
        if getattr(self, "decoupled", False):
            self.loop.call_soon_threadsafe(self.loop.stop)
        if hasattr(self, "llm"):
            self.llm.shutdown()
