"""The subset of vLLM's pooling API (`POST /pooling`) spoken by `hybridrl serve` and `PoolingClient`.

Request:  {"model": str (optional), "input": [[id, ...], ...] | [id, ...] | [str, ...] | str,
           "encoding_format": "float" (optional), "add_special_tokens": bool (optional, strings only)}
Response: {"id": "pool-…", "object": "list", "created": int, "model": str,
           "data": [{"index": i, "object": "pooling", "data": [[v_0], [v_1], ..., [v_{T_i-1}]]}, ...],
           "usage": {"prompt_tokens": N, "total_tokens": N, "completion_tokens": 0}}
i.e. one 1-element list per input token (a token-classification model with num_labels=1, vLLM's
"ALL" pooling for reward models). The client also accepts a flat [v_0, ..., v_{T_i-1}] per item.
"""

from __future__ import annotations

import math
import reprlib
import time
import uuid
from dataclasses import dataclass
from typing import Any

REQUEST_FIELDS = ("model", "input", "encoding_format", "add_special_tokens", "user")


class RequestError(ValueError):
    """A malformed pooling request; `status` is the HTTP status to answer with."""

    def __init__(self, message: str, status: int = 400):
        super().__init__(message)
        self.status = status


@dataclass
class PoolingRequest:
    """A validated request: token-id sequences or texts (exactly one of the two is set)."""
    token_ids: list[list[int]] | None
    texts: list[str] | None
    add_special_tokens: bool = True


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _normalise_input(raw: Any) -> list:
    if isinstance(raw, str):
        return [raw]
    if not isinstance(raw, list) or not raw:
        raise RequestError("'input' must be a non-empty list of token-id lists or strings (or one string)")
    return [raw] if all(_is_int(v) for v in raw) else raw


def _check_ids(row: Any, index: int, vocab_size: int) -> list[int]:
    if not isinstance(row, list) or not row:
        raise RequestError(f"input[{index}] must be a non-empty list of token ids")
    for pos, token in enumerate(row):
        if not _is_int(token) or not 0 <= token < vocab_size:
            raise RequestError(f"input[{index}][{pos}] = {reprlib.repr(token)} is not a token id in "
                               f"0..{vocab_size - 1}")
    return row


def parse_pooling_request(body: Any, served_model: str, vocab_size: int) -> PoolingRequest:
    """Validate a decoded JSON body; raises `RequestError` naming the offending field."""
    if not isinstance(body, dict):
        raise RequestError("the request body must be a JSON object with an 'input' field")
    unknown = sorted(set(body) - set(REQUEST_FIELDS))
    if unknown:
        raise RequestError(f"unsupported field(s) {unknown}; this server accepts {list(REQUEST_FIELDS)}")
    if body.get("model") not in (None, served_model):
        raise RequestError(f"the model {body['model']!r} does not exist; this server serves {served_model!r}", 404)
    if body.get("encoding_format", "float") != "float":
        raise RequestError(f"encoding_format={body['encoding_format']!r} is not supported; use 'float'")
    add_special = body.get("add_special_tokens", True)
    if not isinstance(add_special, bool):
        raise RequestError("'add_special_tokens' must be true or false")
    if "input" not in body:
        raise RequestError("missing field 'input' (token-id lists or strings)")
    rows = _normalise_input(body["input"])
    if all(isinstance(row, str) for row in rows):
        if any(not row for row in rows):
            raise RequestError("input strings must be non-empty")
        return PoolingRequest(token_ids=None, texts=rows, add_special_tokens=add_special)
    return PoolingRequest(token_ids=[_check_ids(row, i, vocab_size) for i, row in enumerate(rows)], texts=None)


def build_pooling_response(outputs: list[list[float]], served_model: str) -> dict:
    """vLLM's PoolingResponse for per-token scalar outputs (one [v] per token)."""
    num_tokens = sum(len(row) for row in outputs)
    return {
        "id": f"pool-{uuid.uuid4().hex}", "object": "list", "created": int(time.time()), "model": served_model,
        "data": [{"index": i, "object": "pooling", "data": [[v] for v in row]} for i, row in enumerate(outputs)],
        "usage": {"prompt_tokens": num_tokens, "total_tokens": num_tokens, "completion_tokens": 0},
    }


def _scalar(value: Any, where: str) -> float:
    if isinstance(value, list) and len(value) == 1:
        value = value[0]
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{where} is {value!r}; expected a number or a 1-element list (a num_labels=1 model)")
    if not math.isfinite(value):
        raise ValueError(f"{where} is not finite ({value})")
    return float(value)


def parse_pooling_response(payload: Any, lengths: list[int]) -> list[list[float]]:
    """Per-token floats for inputs of `lengths`; raises ValueError describing what is wrong."""
    data = payload.get("data") if isinstance(payload, dict) else None
    if not isinstance(data, list):
        raise ValueError("the response is not a JSON object with a 'data' list")
    if len(data) != len(lengths):
        raise ValueError(f"the response has {len(data)} items for {len(lengths)} inputs")
    outputs: list[list[float] | None] = [None] * len(lengths)
    for position, item in enumerate(data):
        index = item.get("index", position) if isinstance(item, dict) else None
        if not _is_int(index) or not 0 <= index < len(lengths) or outputs[index] is not None:
            raise ValueError(f"data[{position}] has a missing, duplicate or out-of-range 'index' ({index!r})")
        values = item.get("data")
        if not isinstance(values, list) or len(values) != lengths[index]:
            size = len(values) if isinstance(values, list) else type(values).__name__
            raise ValueError(f"data[{position}] (index {index}) has {size} outputs for an input of "
                             f"{lengths[index]} tokens; expected one per token")
        outputs[index] = [_scalar(v, f"data[{position}].data[{t}]") for t, v in enumerate(values)]
    return outputs  # type: ignore[return-value]
