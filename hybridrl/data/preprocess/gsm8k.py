"""GSM8K → verl-schema parquet, exactly as verl's examples/data_preprocess/gsm8k.py, or with `--tool` as
verl's gsm8k_tool_agent_loop.py (rows for the `tool_agent` loop and the `calc_gsm8k_reward` tool), or with
`--interaction` as verl's gsm8k_multiturn_w_interaction.py (rows for the `gsm8k` interaction, a simulated user).

    python -m hybridrl.data.preprocess.gsm8k --local_dataset_path PATH --local_save_dir ~/data/gsm8k [--tool|--interaction]
"""

from __future__ import annotations

import argparse
import functools
import re
from pathlib import Path
from typing import Any

from hybridrl.data.preprocess.common import build_parser, convert_splits, download_splits, read_local_splits, run_cli, \
    write_splits

DATA_SOURCE = "openai/gsm8k"
INSTRUCTION = 'Let\'s think step by step and output the final answer after "####".'
# verl's gsm8k_tool_agent_loop.py words both differently (backquotes), and names the tool in a system prompt.
TOOL_INSTRUCTION = "Let's think step by step and output the final answer after `####`."
TOOL_NAME = "calc_gsm8k_reward"
TOOL_SYSTEM_PROMPT = (
    "You are a math expert. You are given a question and you need to solve it step by step. "
    "Reasoning step by step before any tool call. "
    f"You should use the `{TOOL_NAME}` tool after step by step solving the question, "
    "before generate final answer at least once and refine your answer if necessary. "
    "Put your final answer in the format of `#### <answer>`."
)
INTERACTION_SYSTEM_PROMPT = (
    "You are a math expert. You are given a question and you need to solve it step by step. "
    "You should rethinking carefully if user point out your answer is wrong. "
    "Put your final answer in the format of `#### <answer>`."
)
_FINAL_ANSWER = re.compile(r"#### (\-?[0-9\.\,]+)")


def extract_ground_truth(answer: str) -> str | None:
    """The number after the first "#### " with commas removed ("#### 1,000" → "1000"), or None."""
    match = _FINAL_ANSWER.search(answer)
    return None if match is None else match.group(1).replace(",", "")


def make_row(question: str, answer: str, split: str, index: int) -> dict[str, Any]:
    return {
        "data_source": DATA_SOURCE,
        "prompt": [{"role": "user", "content": question + " " + INSTRUCTION}],
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": extract_ground_truth(answer)},
        "extra_info": {"split": split, "index": index, "answer": answer, "question": question},
    }


def make_tool_row(question: str, answer: str, split: str, index: int) -> dict[str, Any]:
    """verl's tool-agent row: `agent_name`, the tool-naming system prompt, and the ground truth handed to the
    tool's `create` through extra_info.tools_kwargs."""
    solution = extract_ground_truth(answer)
    return {
        "data_source": DATA_SOURCE,
        "agent_name": "tool_agent",
        "prompt": [{"role": "system", "content": TOOL_SYSTEM_PROMPT},
                   {"role": "user", "content": question + " " + TOOL_INSTRUCTION}],
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": solution},
        "extra_info": {"split": split, "index": index, "answer": answer, "question": question,
                       "need_tools_kwargs": True,
                       "tools_kwargs": {TOOL_NAME: {"create_kwargs": {"ground_truth": solution}}}},
    }


def make_interaction_row(question: str, answer: str, split: str, index: int) -> dict[str, Any]:
    """verl's interaction row: the row names the `gsm8k` interaction and hands it the ground truth through
    extra_info.interaction_kwargs."""
    solution = extract_ground_truth(answer)
    prompt = question + " " + TOOL_INSTRUCTION
    return {
        "data_source": DATA_SOURCE,
        "prompt": [{"role": "system", "content": INTERACTION_SYSTEM_PROMPT}, {"role": "user", "content": prompt}],
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": solution},
        "extra_info": {"split": split, "index": index, "answer": answer, "question": question,
                       "interaction_kwargs": {"name": "gsm8k", "query": prompt, "ground_truth": solution}},
    }


def convert_rows(raw_rows: list[dict], split: str, source: str, first_index: int = 0,
                 tool: bool = False, interaction: bool = False) -> list[dict[str, Any]]:
    """verl rows from raw GSM8K rows (`tool`: the tool-agent format; `interaction`: the interaction format); a row
    without question/answer or "#### N" is an error naming it."""
    rows = []
    for number, raw in enumerate(raw_rows):
        for key in ("question", "answer"):
            if not isinstance(raw.get(key), str):
                raise ValueError(f"{source}: row {number} has no {key!r} text (columns: {sorted(raw)}); "
                                 f"GSM8K rows need 'question' and 'answer'")
        if extract_ground_truth(raw["answer"]) is None:
            raise ValueError(f"{source}: row {number} answer has no final '#### <number>' line: "
                             f"{raw['answer'][-120:]!r}; fix or remove the row")
        build = make_tool_row if tool else make_interaction_row if interaction else make_row
        rows.append(build(raw["question"], raw["answer"], split, first_index + number))
    return rows


def preprocess(local_dataset_path: str | Path | None, local_save_dir: str | Path, tool: bool = False,
               interaction: bool = False) -> dict[str, Path]:
    """Read GSM8K (local files, else the HF hub), write `{save_dir}/{train,test}.parquet`; returns the paths."""
    if tool and interaction:
        raise ValueError("choose one row format: --tool (the calc_gsm8k_reward tool) or --interaction (the gsm8k "
                         "simulated user)")
    raw = read_local_splits(local_dataset_path) if local_dataset_path else download_splits(DATA_SOURCE, "main")
    convert = functools.partial(convert_rows, tool=tool, interaction=interaction)
    return write_splits(convert_splits(raw, convert), local_save_dir)


def _run(args: argparse.Namespace) -> None:
    preprocess(args.local_dataset_path, args.local_save_dir, tool=args.tool, interaction=args.interaction)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser("GSM8K to verl-schema parquet", default_save_dir="~/data/gsm8k")
    parser.add_argument("--tool", action="store_true",
                        help="rows for the tool agent loop and the calc_gsm8k_reward tool (verl's "
                             "gsm8k_tool_agent_loop.py format)")
    parser.add_argument("--interaction", action="store_true",
                        help="rows for the gsm8k interaction, a simulated user (verl's gsm8k_multiturn_w_interaction.py "
                             "format; actor_rollout_ref.rollout.multi_turn.interaction_config_path)")
    return run_cli(argv, parser, _run)


if __name__ == "__main__":
    raise SystemExit(main())
