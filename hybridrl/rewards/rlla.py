"""The RLLA tool-use reward of GDPO (Liu et al. 2026, arXiv:2601.05242), as verl's `rlla.py`, which verl's
GDPO example passes as `custom_reward_function.path`: format (0 or 1) + tool-call correctness (-3..3).

Format: the assistant turn is `<think>...</think>` followed by exactly the parts the ground truth has
(`<tool_call>\\n...\\n</tool_call>` and/or `<response>...</response>`, each once). Correctness: for each
ground-truth call, the best unused predicted call of the same name scores (frequency-aware Jaccard of
parameter names) + (number of parameter values equal); the total plus the Jaccard of call names is
scaled from [0, 1 + sum(1 + num_params)] to [-3, 3]. A missing or unparsable tool call scores -3.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from typing import Any

TOOL_MAX, TOOL_MIN, FORMAT_MAX, FORMAT_MIN = 3.0, -3.0, 1.0, 0.0
_CHAT_TURNS = {"llama": ("<|start_header_id|>assistant<|end_header_id|>", "<|eot_id|>"),
               "qwen": ("<|im_start|>assistant", "<|im_end|>")}


def match_score(first: list, second: list) -> float:
    """|intersection| / |union| counting repeats; 1.0 for equal lists, 0.0 when one is empty."""
    if first == second:
        return 1.0
    if not first or not second:
        return 0.0
    count1, count2 = Counter(first), Counter(second)
    intersection = sum(min(count1[key], count2[key]) for key in count1.keys() & count2.keys())
    union = len(first) + len(second) - intersection
    return intersection / union if union > 0 else 0.0


def format_reward(response: str, answer: str) -> float:
    has_response, has_call = "<response>" in answer, "<tool_call>" in answer
    parts = ([r"<tool_call>\n.*?\n</tool_call>"] if has_call else []) + ([r"<response>.*?</response>"] if has_response
                                                                         else [])
    pattern = r"^<think>.*?</think>" + "".join(r"\n" + part for part in parts) + "$"
    tags = (["<tool_call>", "</tool_call>"] if has_call else []) + (["<response>", "</response>"] if has_response
                                                                    else [])
    if re.search(pattern, response, re.DOTALL) and all(response.count(tag) == 1 for tag in tags):
        return FORMAT_MAX
    return FORMAT_MIN


def tool_call_reward(gt_tools: list[dict], pd_tools: list[dict], max_reward: float, min_reward: float) -> float:
    if gt_tools == pd_tools:
        return max_reward
    score = match_score([tool["name"] for tool in gt_tools], [tool["name"] for tool in pd_tools])
    possible, used = 1.0, set()
    for gt_tool in gt_tools:
        gt_params = gt_tool["parameters"]
        possible += 1.0 + len(gt_params)
        best, best_index = 0.0, -1
        for index, pd_tool in enumerate(pd_tools):
            if index in used or pd_tool["name"] != gt_tool["name"]:
                continue
            pd_params = pd_tool["parameters"]
            total = match_score(list(gt_params.keys()), list(pd_params.keys())) + sum(
                1.0 for key, value in gt_params.items() if key in pd_params and pd_params[key] == value)
            if total > best:
                best, best_index = total, index
        if best_index >= 0:
            used.add(best_index)
            score += best
    return (max_reward - min_reward) * score / possible + min_reward


def _calls(text: str) -> list[dict]:
    block = text.split("<tool_call>")[1].split("</tool_call>")[0].strip()
    return [json.loads(line) for line in block.split("\n")]


def correctness_reward(response: str, answer: str) -> float:
    if "<tool_call>" not in answer:
        return 0.0
    gt_tools = _calls(answer)
    try:
        if "<tool_call>" not in response or "</tool_call>" not in response:
            return TOOL_MIN
        return tool_call_reward(gt_tools, _calls(response), TOOL_MAX, TOOL_MIN)
    except Exception:  # unparsable JSON, a call without name/parameters
        return TOOL_MIN


def compute_score(data_source: str, solution_str: str, ground_truth: str, extra_info: dict, step: int = 0) -> dict[str, Any]:
    """{"score": format + correctness, "format_reward", "accuracy_reward"}; extra_info["experiment_name"] must
    contain "llama" or "qwen" (which chat template the response text carries)."""
    experiment = (extra_info or {}).get("experiment_name", "")
    family = next((name for name in _CHAT_TURNS if name in experiment), None)
    if family is None:
        raise ValueError(f"rlla reward: extra_info['experiment_name']={experiment!r} names neither llama nor qwen; "
                         "it selects the chat template to cut the assistant turn from")
    start, end = _CHAT_TURNS[family]
    response = solution_str.split(start)[-1].split(end)[0].strip()
    format_score, accuracy = format_reward(response, ground_truth), correctness_reward(response, ground_truth)
    return {"score": format_score + accuracy, "format_reward": format_score, "accuracy_reward": accuracy}
