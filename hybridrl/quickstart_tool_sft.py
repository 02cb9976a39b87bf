"""The tool quickstart's warm start: supervised fine-tuning of the tiny model on worked calculator traces.

A worked trace is exactly the token stream the agent loop builds for the same turns (continuous tokens): the
prompt, the model's hermes `<tool_call>` to the calculator, the tool's `<tool_response>` (inserted, not trained
on), and the model's answer, which repeats the result. Only the model's own tokens are trained on.

Copying is the skill: the expression from the question into the call, the 5-digit result from the tool's answer
into the final answer. A 2-layer model copies with attention heads that look back a fixed distance, and such a
head forms quickly over a short context but slowly, and at a seed-dependent step, over a whole trace (~160
tokens, where attention starts out uniform and the copied digits are a few percent of it). So the batches mix
whole traces with short pieces of them (short sequences first: Li et al. 2022, sequence length warmup), and
every example weighs the same (the mean over its own tokens, then over the batch: verl's seq-mean-token-mean;
under one token-mean the ~60 tokens of JSON around each call drown the 11 copied characters).

The warm start also imitates the decision to answer without the tool on some problems (only that first token of
such an answer is trained on: its digits are arithmetic the tiny model cannot do). The warm-started model thus
calls the calculator on only part of the problems: what RL then learns is to call it every time.
"""

from __future__ import annotations

import json
import os
import random
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, Iterator

CALCULATOR = "hybridrl.rollout.tools.builtin.calculator"


@dataclass
class Trace:
    """Training tokens: `ids`, and `trained` (1 where the model wrote the token and it is trained on)."""

    ids: list[int]
    trained: list[int]

    @property
    def first_trained(self) -> int:
        return self.trained.index(1)

    @property
    def first_turn_end(self) -> int:
        """The index after the model's first turn (its tool call)."""
        return self.first_trained + self.trained[self.first_trained:].index(0)


def worked_trace(renderer: Any, tools: list[dict], row: dict[str, Any]) -> Trace:
    """`row` solved as the agent loop would build it: the model calls the calculator on the problem, reads the
    result and repeats it as the answer."""
    from hybridrl.rollout.agent.output import TokenStream
    from hybridrl.rollout.tools.builtin.calculator import calculator

    expression = row["prompt"][0]["content"].rstrip("=")
    result = calculator(expression)
    stream = TokenStream(renderer.initial_prompt(row["prompt"], tools=tools))
    call = renderer.encode("<tool_call>" + json.dumps({"name": "calculator", "arguments": {"expression": expression}})
                           + "</tool_call><|im_end|>")
    stream.add_sampled(call, [0.0] * len(call))
    body, generation_prompt = renderer.observation_ids([{"role": "tool", "content": result}], tools=tools)
    stream.add_inserted(renderer.boundary.glue_after(call), "glue")
    stream.add_inserted(body, "tool")
    stream.add_inserted(generation_prompt, "glue")
    answer = renderer.encode(result + "<|im_end|>")
    stream.add_sampled(answer, [0.0] * len(answer))
    return Trace(stream.token_ids, [0] * len(stream.prompt_ids) + stream.response_mask)


def answer_turn(trace: Trace) -> Trace:
    """The tail after the model's call: the calculator's result, then the answer that repeats it (~35 tokens)."""
    return Trace(trace.ids[trace.first_turn_end:], trace.trained[trace.first_turn_end:])


def call_turn(trace: Trace, start: int) -> Trace:
    """The trace from `start` to the end of the model's call (a start inside the system prompt shortens it)."""
    return Trace(trace.ids[start:trace.first_turn_end], trace.trained[start:trace.first_turn_end])


def after_the_call_decision(trace: Trace) -> Trace:
    """`trace` with its first model token (`<tool_call>`, the decision to call) not counted."""
    first = trace.first_trained
    return Trace(trace.ids, trace.trained[:first] + [0] + trace.trained[first + 1:])


def call_decision(trace: Trace) -> Trace:
    """The prompt of `trace` and its first model token (`<tool_call>`), the only one counted."""
    first = trace.first_trained
    return Trace(trace.ids[: first + 1], [0] * first + [1])


def direct_answer_start(renderer: Any, tools: list[dict], row: dict[str, Any]) -> Trace:
    """The decision to answer without the calculator: the prompt, then the answer's first digit, trained on."""
    prompt = renderer.initial_prompt(row["prompt"], tools=tools)
    return Trace(prompt + renderer.encode(str(row["reward_model"]["ground_truth"])[0]), [0] * len(prompt) + [1])


@dataclass
class WarmStartMix:
    """One warm-start batch: `answer_turns` answer turns, `call_turns` call turns cropped at a random start inside
    the system prompt, `direct_answers` direct answer starts, whole traces for the rest. The direct answers set
    how often the warm-started model skips the tool: each is one trained token against a whole trace's call
    decision, one of ~70 equally weighted tokens, so one in 32 leaves the model calling on roughly a fifth to a
    half of the problems."""

    batch_size: int = 32
    answer_turns: int = 8
    call_turns: int = 8
    direct_answers: int = 1

    @property
    def whole_traces(self) -> int:
        return self.batch_size - self.answer_turns - self.call_turns - self.direct_answers


@dataclass
class WarmStartData:
    """The examples batches are drawn from. `system_length`: tokens of the system prompt (the tool list)."""

    traces: list[Trace]
    direct: list[Trace]
    system_length: int
    answer_turns: list[Trace] = field(init=False)

    def __post_init__(self) -> None:
        self.answer_turns = [answer_turn(trace) for trace in self.traces]

    def batches(self, mix: WarmStartMix, seed: int) -> Iterator[list[Trace]]:
        """Endless seeded batches of `mix`."""
        rng = random.Random(seed)
        while True:
            calls = [call_turn(trace, rng.randint(0, self.system_length))
                     for trace in rng.choices(self.traces, k=mix.call_turns)]
            yield (rng.choices(self.traces, k=mix.whole_traces) + rng.choices(self.answer_turns, k=mix.answer_turns)
                   + calls + rng.choices(self.direct, k=mix.direct_answers))


def trained_log_probs(model: Any, examples: list[Trace], pad_id: int) -> tuple[Any, Any]:
    """(sum of log-probs of each example's trained tokens, their count), shapes (B,) and (B,)."""
    import torch

    batch = collate(examples, pad_id)
    logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits[:, :-1]
    labels = batch["labels"][:, 1:]
    trained = labels != -100
    log_probs = torch.log_softmax(logits.float(), dim=-1).gather(-1, labels.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    return (log_probs * trained).sum(dim=1), trained.sum(dim=1)


def sample_exact_probability(model: Any, examples: list[Trace], pad_id: int) -> float:
    """The mean probability that sampling at temperature 1 writes each example's trained tokens exactly."""
    import torch

    model.eval()
    with torch.no_grad():
        log_prob_sums, _ = trained_log_probs(model, examples, pad_id)
    model.train()
    return float(log_prob_sums.exp().mean())


def collate(examples: list[Trace], pad_id: int) -> dict[str, Any]:
    """Right-padded ids and attention mask; labels -100 except on trained tokens (shapes (B, T))."""
    import torch

    width = max(len(example.ids) for example in examples)
    ids = torch.full((len(examples), width), pad_id, dtype=torch.long)
    labels = torch.full_like(ids, -100)
    mask = torch.zeros_like(ids)
    for row, example in enumerate(examples):
        tokens = torch.tensor(example.ids)
        ids[row, : len(tokens)] = tokens
        mask[row, : len(tokens)] = 1
        labels[row, : len(tokens)] = torch.where(torch.tensor(example.trained, dtype=torch.bool), tokens, -100)
    return {"input_ids": ids, "attention_mask": mask, "labels": labels}


def warm_start_data(renderer: Any, rows: list[dict[str, Any]]) -> WarmStartData:
    from hybridrl.rollout.tools.function_tool import load_function_tools

    tools = [tool.tool_schema.to_dict() for tool in load_function_tools(CALCULATOR)]
    system_length = len(renderer.initial_prompt(rows[0]["prompt"], tools=tools)) - len(
        renderer.initial_prompt(rows[0]["prompt"]))
    return WarmStartData([worked_trace(renderer, tools, row) for row in rows],
                         [direct_answer_start(renderer, tools, row) for row in rows], system_length)


def warm_start(model_dir: str, rows: list[dict[str, Any]], out_dir: str, *, target: float = 0.8,
               max_steps: int = 600, cooldown_steps: int = 20, lr: float = 3e-3, mix: WarmStartMix | None = None,
               num_held_out: int = 64, seed: int = 0) -> dict[str, float]:
    """Train until the model, once it calls the calculator, writes the rest of a worked trace exactly with
    probability `target` at temperature 1 (checked every 10 steps on `num_held_out` rows it does not train on; at
    most `max_steps`), then `cooldown_steps` with the learning rate decaying to 0 (the decay phase of a
    warmup-stable-decay schedule); save an HF model directory to `out_dir`. Returns what it measured."""
    import torch

    from hybridrl.models.hf import load_causal_lm, load_tokenizer
    from hybridrl.rollout.agent.chat_tokens import ChatRenderer

    torch.manual_seed(seed)
    tokenizer, model = load_tokenizer(model_dir), load_causal_lm(model_dir)
    data = warm_start_data(ChatRenderer(tokenizer, model_type=model.config.model_type), rows[num_held_out:])
    held_out = warm_start_data(ChatRenderer(tokenizer, model_type=model.config.model_type), rows[:num_held_out])
    copies = [after_the_call_decision(trace) for trace in held_out.traces]
    batches = data.batches(mix or WarmStartMix(), seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    steps, copy_exact = 0, 0.0
    with one_cpu_thread():
        while copy_exact < target and steps < max_steps:
            train_steps(model, optimizer, batches, 10, tokenizer.pad_token_id)
            steps += 10
            copy_exact = sample_exact_probability(model, copies, tokenizer.pad_token_id)
        decay = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1 - step / cooldown_steps)
        loss = train_steps(model, optimizer, batches, cooldown_steps, tokenizer.pad_token_id, decay)
    os.makedirs(out_dir, exist_ok=True)
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    decisions = [call_decision(trace) for trace in held_out.traces]
    return {"steps": steps + cooldown_steps, "loss": loss, "target": target, "copy_exact_at_stop": copy_exact,
            "copy_exact": sample_exact_probability(model, copies, tokenizer.pad_token_id),
            "call_probability": sample_exact_probability(model, decisions, tokenizer.pad_token_id)}


def one_cpu_thread() -> AbstractContextManager[None]:
    """One intra-op thread (unless OMP_NUM_THREADS says otherwise): the 128-wide matmuls gain little from more, and
    a core another process keeps busy stalls every parallel region at its barrier. A warm-start step of 32
    traces took 0.26 s on one thread, 0.16 s on two idle cores, 2 s on two cores one of which was busy."""
    from hybridrl.distributed.cpu_threads import cpu_threads

    return cpu_threads(1)


def train_steps(model: Any, optimizer: Any, batches: Iterator[list[Trace]], steps: int, pad_id: int,
                scheduler: Any = None) -> float:
    """`steps` optimizer steps on the per-example mean negative log-likelihood; returns the last loss."""
    import torch

    loss = torch.tensor(float("nan"))
    model.train()
    for _, batch in zip(range(steps), batches):
        log_prob_sums, counts = trained_log_probs(model, batch, pad_id)
        loss = -(log_prob_sums / counts).mean()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        if scheduler is not None:
            scheduler.step()
    return loss.item()
