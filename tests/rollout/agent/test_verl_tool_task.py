"""verl's GSM8K tool task end to end on the data side: `preprocess gsm8k --tool` rows of real GSM8K, read by the
dataset, run by `tool_agent` with verl's own tool YAML (`verl.tools.gsm8k_tool.Gsm8kTool`)."""

from __future__ import annotations

import json
import re

from hybridrl.data.dataset import RLDataset
from hybridrl.data.preprocess.gsm8k import preprocess
from hybridrl.rollout.agent import AgentLoopManager
from tests.rollout.agent.helpers import ScriptedEngine, rollout_config, tool_call
from tests.rollout.tools.test_registry import VERL_GSM8K_TOOL_YAML


def test_verl_tool_rows_and_tool_yaml_run_the_tool_agent(tmp_path, gsm8k_dir, chatml_tokenizer):
    raw = tmp_path / "raw"
    raw.mkdir()
    lines = (gsm8k_dir / "test.jsonl").read_text().splitlines()[:4]
    (raw / "test.jsonl").write_text("\n".join(lines) + "\n")
    preprocess(raw, tmp_path / "data", tool=True)
    answers = {json.loads(line)["question"]: json.loads(line)["answer"].split("#### ")[-1].replace(",", "")
               for line in lines}
    (tmp_path / "tools.yaml").write_text(VERL_GSM8K_TOOL_YAML)

    def as_seen(text: str) -> str:  # the char tokenizer maps non-ASCII (GSM8K's "’") to <unk>
        return chatml_tokenizer.decode(chatml_tokenizer(text, add_special_tokens=False)["input_ids"])

    def respond(text: str, turn: int) -> str:
        # Row 0 answers wrongly first, then right; the others answer right at once and then stop.
        question = next(q for q in answers if as_seen(q)[:40] in text)
        right = answers[question]
        first_row = question == json.loads(lines[0])["question"]
        if turn == 0:
            return tool_call("calc_gsm8k_reward", answer="0" if first_row else right) + "<|im_end|>"
        if turn == 1 and first_row:
            return tool_call("calc_gsm8k_reward", answer=right) + "<|im_end|>"
        return f"#### {right}<|im_end|>"

    dataset = RLDataset(str(tmp_path / "data" / "test.parquet"), chatml_tokenizer, max_prompt_length=1024,
                        return_raw_chat=True)
    prompts = dataset.collate_fn()([dataset[i] for i in range(len(dataset))])
    config = rollout_config(prompt_length=1024, response_length=512, tool_config_path=str(tmp_path / "tools.yaml"))
    manager = AgentLoopManager(ScriptedEngine(chatml_tokenizer, respond), chatml_tokenizer, config, model_type="qwen2")
    batch = manager.generate_sequences(prompts)
    manager.close()
    assert list(batch["agent_name"]) == ["tool_agent"] * 4  # chosen per row by the dataset's agent_name column
    assert list(batch["__num_turns__"]) == [6, 4, 4, 4]
    infos = list(batch["extra_info"])
    assert [info["tool_reward_scores"] for info in infos] == [{"calc_gsm8k_reward": 1.0}] * 4
    assert infos[0]["tool_rewards"] == [-0.05, 0.0] and all(info["tool_rewards"] == [0.0] for info in infos[1:])
    assert [info["num_turns"] for info in infos] == [6, 4, 4, 4] and infos[0]["question"] in answers
    width = batch["prompts"].shape[1]
    first = chatml_tokenizer.decode(batch["input_ids"][0][batch["attention_mask"][0].bool()], skip_special_tokens=False)
    assert "calc_gsm8k_reward(answer)" in first[: first.index("<|im_start|>user")]  # the tool in the system turn
    assert re.search(r"<tool_response>Current parsed answer='0' reward=0.0</tool_response>", first)
    assert int(batch["response_mask"][0].sum()) < int(batch["attention_mask"][0, width:].sum())
