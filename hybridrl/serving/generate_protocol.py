"""The generation requests a served generative reward model answers: SGLang's native `POST /generate` and
OpenAI's `POST /v1/chat/completions` and `POST /v1/completions` (the subsets verl's GenRM reward functions use).

`/generate`  {"input_ids": [id, ...] | "text": str, "sampling_params": {"max_new_tokens", "temperature", "top_p",
             "top_k", "stop_token_ids", "n": 1, "ignore_eos", "skip_special_tokens"}, "return_logprob": bool, "rid"}
          -> {"text", "output_ids", "meta_info": {"id", "finish_reason": {"type": "stop"|"length"|"abort", ...},
             "prompt_tokens", "completion_tokens", "cached_tokens", "e2e_latency", ["output_token_logprobs"]}}
             (a batch: "input_ids" a list of id lists or "text" a list, "sampling_params" one or one per prompt
             -> a list of those answers)
`/v1/chat/completions`  {"messages": [{"role", "content"}, ...], "max_tokens" | "max_completion_tokens",
             "temperature", "top_p", "top_k", "n": 1, "seed", "model" (any: one model is served)}
          -> {"id", "object": "chat.completion", "choices": [{"index": 0, "message": {"role": "assistant",
             "content"}, "finish_reason": "stop"|"length"}], "usage": {...}}
`/v1/completions`  {"prompt": str | [id, ...], ...the same sampling fields} -> {"object": "text_completion", ...}

Sampling knobs this engine cannot honour (penalties, logit bias, stop strings, n > 1, streaming) are refused by
name rather than ignored; any other unknown field is refused too, so a typo never changes what is sampled.
"""

from __future__ import annotations

import reprlib
import time
import uuid
from dataclasses import dataclass
from typing import Any

from hybridrl.rollout.base import SamplingParams, TokenOutput
from hybridrl.serving.protocol import RequestError

ROUTES = ("generate", "chat", "completions")
SGLANG_SAMPLING = ("max_new_tokens", "temperature", "top_p", "top_k", "stop_token_ids", "n", "ignore_eos",
                   "skip_special_tokens", "seed")
SGLANG_FIELDS = ("input_ids", "text", "sampling_params", "return_logprob", "rid", "stream")
OPENAI_SAMPLING = ("max_tokens", "max_completion_tokens", "temperature", "top_p", "top_k", "n", "seed",
                   "stop_token_ids", "ignore_eos", "skip_special_tokens")
OPENAI_FIELDS = ("model", "messages", "prompt", "stream", "user", "logprobs", "add_generation_prompt",
                 "chat_template_kwargs", *OPENAI_SAMPLING)
# fields a client may send only at their neutral value: name -> the neutral values
NEUTRAL_ONLY = {"frequency_penalty": (0, 0.0), "presence_penalty": (0, 0.0), "repetition_penalty": (1, 1.0),
                "logit_bias": (None, {}), "stop": (None, [], ""), "min_p": (0, 0.0), "echo": (False,),
                "best_of": (None, 1), "suffix": (None,), "tools": (None, []), "tool_choice": (None, "none"),
                "response_format": (None,)}


@dataclass
class GenerationRequest:
    """A validated request: the prompt (ids, text, or chat messages: exactly one set), its sampling parameters
    (max_new_tokens None: the rest of the context), and how to answer."""

    route: str
    params: SamplingParams
    prompt_ids: list[int] | None = None
    text: str | None = None
    messages: list[dict] | None = None
    add_generation_prompt: bool = True
    chat_template_kwargs: dict | None = None  # vLLM's extension, e.g. {"enable_thinking": false} for Qwen3
    skip_special_tokens: bool = True
    return_logprob: bool = False
    request_id: str = ""
    model: str | None = None


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _number(body: dict, key: str, low: float, high: float | None = None) -> float | None:
    value = body.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < low or (high is not None and value > high):
        span = f"in [{low}, {high}]" if high is not None else f">= {low}"
        raise RequestError(f"'{key}' = {reprlib.repr(value)} must be a number {span}")
    return float(value)


def _count(body: dict, key: str) -> int | None:
    value = body.get(key)
    if value is None:
        return None
    if not _is_int(value) or value < 1:
        raise RequestError(f"'{key}' = {reprlib.repr(value)} must be a whole number >= 1")
    return value


def _flag(body: dict, key: str, default: bool) -> bool:
    value = body.get(key, default)
    if not isinstance(value, bool):
        raise RequestError(f"'{key}' must be true or false, not {reprlib.repr(value)}")
    return value


def check_ids(ids: Any, key: str, vocab_size: int) -> list[int]:
    if not isinstance(ids, list) or not ids:
        raise RequestError(f"'{key}' must be a non-empty list of token ids")
    for position, token in enumerate(ids):
        if not _is_int(token) or not 0 <= token < vocab_size:
            raise RequestError(f"{key}[{position}] = {reprlib.repr(token)} is not a token id in 0..{vocab_size - 1}")
    return ids


def _check_fields(body: dict, accepted: tuple[str, ...], route: str) -> None:
    for key, neutral in NEUTRAL_ONLY.items():
        if key in body and body[key] not in neutral:
            raise RequestError(f"'{key}' = {reprlib.repr(body[key])} is not supported by this server (hybridrl's "
                               f"engine serving the reward model); leave it out")
    unknown = sorted(set(body) - set(accepted) - set(NEUTRAL_ONLY))
    if unknown:
        raise RequestError(f"unsupported field(s) {unknown} for {route}; this server accepts {sorted(accepted)}")
    if body.get("stream"):
        raise RequestError("'stream': true is not supported; send stream=false (the whole answer comes at once)")
    if body.get("n", 1) != 1:
        raise RequestError(f"'n' = {reprlib.repr(body.get('n'))}: one sequence per request; send n requests")


def sampling_params(body: dict, max_key: str, seed: Any = None) -> SamplingParams:
    """SamplingParams from the request's sampling fields (temperature 0: greedy; top_k <= 0 / top_p 1: off)."""
    temperature = _number(body, "temperature", 0.0)
    top_p = _number(body, "top_p", 0.0, 1.0)
    top_k = body.get("top_k", -1)
    if not _is_int(top_k):
        raise RequestError(f"'top_k' = {reprlib.repr(top_k)} must be a whole number (-1 or 0: off)")
    stop_ids = body.get("stop_token_ids") or []
    if not isinstance(stop_ids, list) or not all(_is_int(t) and t >= 0 for t in stop_ids):
        raise RequestError("'stop_token_ids' must be a list of token ids")
    if seed is not None and not _is_int(seed):
        raise RequestError(f"'seed' = {reprlib.repr(seed)} must be a whole number")
    temperature = 1.0 if temperature is None else temperature
    return SamplingParams(temperature=temperature, top_p=1.0 if top_p is None else top_p, top_k=top_k,
                          do_sample=temperature > 0, max_new_tokens=_count(body, max_key) or 0,
                          ignore_eos=_flag(body, "ignore_eos", False), stop_token_ids=tuple(stop_ids), seed=seed)


def parse_generate(body: Any, vocab_size: int) -> tuple[list[GenerationRequest], bool]:
    """SGLang's native /generate request: one prompt, or a batch (`input_ids` a list of id lists, `text` a list of
    strings; `sampling_params` one object for all or a list, one per prompt). Returns the requests and whether it
    was a batch (answered with a list). Raises RequestError naming the field."""
    if not isinstance(body, dict):
        raise RequestError("the request body must be a JSON object with 'input_ids' or 'text'")
    _check_fields(body, SGLANG_FIELDS, "/generate")
    if ("input_ids" in body) == ("text" in body):
        raise RequestError("send exactly one of 'input_ids' (token ids) and 'text' (a prompt string)")
    key = "input_ids" if "input_ids" in body else "text"
    value = body[key]
    batched = isinstance(value, list) and bool(value) and (
        all(isinstance(row, list) for row in value) if key == "input_ids" else True)
    prompts = value if batched else [value]
    samplings = body.get("sampling_params", {})
    samplings = samplings if isinstance(samplings, list) else [samplings] * len(prompts)
    if len(samplings) != len(prompts):
        raise RequestError(f"'sampling_params' is a list of {len(samplings)} for {len(prompts)} prompts; send one "
                           "object for all, or one per prompt")
    rid = body.get("rid") or f"gen-{uuid.uuid4().hex}"
    logprob = _flag(body, "return_logprob", False)
    requests = []
    for index, (prompt, sampling) in enumerate(zip(prompts, samplings)):
        where = f"{key}[{index}]" if batched else key
        requests.append(_generate_request(prompt, sampling, key, where, vocab_size, logprob,
                                          f"{rid}-{index}" if batched else str(rid)))
    return requests, batched


def _generate_request(prompt: Any, sampling: Any, key: str, where: str, vocab_size: int, return_logprob: bool,
                      request_id: str) -> GenerationRequest:
    if not isinstance(sampling, dict):
        raise RequestError("'sampling_params' must be a JSON object (or a list of them, one per prompt)")
    _check_fields(sampling, SGLANG_SAMPLING, "/generate sampling_params")
    if key == "text" and (not isinstance(prompt, str) or not prompt):
        raise RequestError(f"'{where}' must be a non-empty string")
    ids = check_ids(prompt, where, vocab_size) if key == "input_ids" else None
    return GenerationRequest("generate", sampling_params(sampling, "max_new_tokens", sampling.get("seed")),
                             prompt_ids=ids, text=None if ids is not None else prompt,
                             skip_special_tokens=_flag(sampling, "skip_special_tokens", True),
                             return_logprob=return_logprob, request_id=request_id)


def parse_openai(body: Any, route: str, vocab_size: int) -> GenerationRequest:
    """OpenAI's chat (`route="chat"`, messages) or completions (`route="completions"`, prompt) request."""
    if not isinstance(body, dict):
        raise RequestError("the request body must be a JSON object")
    field = "messages" if route == "chat" else "prompt"
    accepted = tuple(key for key in OPENAI_FIELDS if key not in ("messages", "prompt")) + (field,)
    _check_fields(body, accepted, f"/v1/{'chat/completions' if route == 'chat' else 'completions'}")
    if field not in body:
        raise RequestError(f"missing field '{field}'")
    if body.get("logprobs") not in (None, False, 0):
        raise RequestError("'logprobs' is not supported on the OpenAI routes; POST /generate with return_logprob")
    max_key = "max_completion_tokens" if body.get("max_completion_tokens") is not None else "max_tokens"
    request = GenerationRequest(route, sampling_params(body, max_key, body.get("seed")), model=body.get("model"),
                                skip_special_tokens=_flag(body, "skip_special_tokens", True),
                                add_generation_prompt=_flag(body, "add_generation_prompt", True),
                                request_id=f"{'chatcmpl' if route == 'chat' else 'cmpl'}-{uuid.uuid4().hex}")
    value = body[field]
    template_kwargs = body.get("chat_template_kwargs")
    if template_kwargs is not None and (route != "chat" or not isinstance(template_kwargs, dict)):
        raise RequestError("'chat_template_kwargs' must be a JSON object, on /v1/chat/completions")
    request.chat_template_kwargs = template_kwargs
    if route == "chat":
        request.messages = check_messages(value)
    elif isinstance(value, str) and value:
        request.text = value
    elif isinstance(value, list) and value and all(_is_int(v) for v in value):
        request.prompt_ids = check_ids(value, "prompt", vocab_size)
    else:
        raise RequestError("'prompt' must be a non-empty string or a list of token ids (one prompt per request)")
    return request


def check_messages(messages: Any) -> list[dict]:
    """The chat, with OpenAI's text content parts ([{"type": "text", "text": ...}, ...]) joined into one string."""
    if not isinstance(messages, list) or not messages:
        raise RequestError("'messages' must be a non-empty list of {'role': ..., 'content': ...} objects")
    checked = []
    for index, message in enumerate(messages):
        if not isinstance(message, dict) or not isinstance(message.get("role"), str) or "content" not in message:
            raise RequestError(f"messages[{index}] must be an object with a string 'role' and a 'content'")
        content = message["content"]
        if isinstance(content, list):
            if not all(isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str)
                       for part in content):
                raise RequestError(f"messages[{index}].content: only text parts ({{'type': 'text', 'text': ...}}) "
                                   "are supported by this server")
            message = {**message, "content": "".join(part["text"] for part in content)}
        checked.append(message)
    return checked


def generate_response(request: GenerationRequest, output: TokenOutput, text: str, prompt_tokens: int,
                      started: float) -> dict:
    """SGLang's /generate answer."""
    reason: dict[str, Any] = {"type": output.stop_reason}
    if output.stop_reason == "stop" and output.token_ids:
        reason["matched"] = output.token_ids[-1]
    elif output.stop_reason == "length":
        reason["length"] = len(output.token_ids)
    meta = {"id": request.request_id, "finish_reason": reason, "prompt_tokens": prompt_tokens,
            "completion_tokens": len(output.token_ids), "cached_tokens": output.prefix_cache_hit_tokens,
            "e2e_latency": time.monotonic() - started}
    if request.return_logprob:
        meta["output_token_logprobs"] = [[lp, token, None] for lp, token in zip(output.log_probs, output.token_ids)]
    return {"text": text, "output_ids": list(output.token_ids), "meta_info": meta}


def openai_response(request: GenerationRequest, output: TokenOutput, text: str, prompt_tokens: int,
                    served_model: str) -> dict:
    """OpenAI's chat.completion or text_completion answer."""
    reason = "length" if output.stop_reason == "length" else "stop" if output.stop_reason == "stop" else "abort"
    choice: dict[str, Any] = {"index": 0, "finish_reason": reason, "logprobs": None}
    if request.route == "chat":
        choice["message"] = {"role": "assistant", "content": text}
    else:
        choice["text"] = text
    completion = len(output.token_ids)
    return {"id": request.request_id, "object": "chat.completion" if request.route == "chat" else "text_completion",
            "created": int(time.time()), "model": request.model or served_model, "choices": [choice],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion,
                      "total_tokens": prompt_tokens + completion}}
