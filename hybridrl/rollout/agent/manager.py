"""`AgentLoopManager`: a prompt batch in, one row per trajectory out, every row's agent loop running at once.

One asyncio event loop runs all trajectories of the batch concurrently over one `RequestEngine`: while
some wait for tools, the engine keeps decoding the others (it batches whatever requests are in flight).
verl spreads the batch over `rollout.agent.num_workers` worker processes instead; here that key sizes
the agent loops' thread pools (chat-template rendering and decoding; plain-function tools).

Entry point for the trainer: `generate_sequences(prompts, params)` with the rollout worker's contract:
`prompts` is the dataset batch (verl's row fields: raw_prompt, agent_name, extra_info, ...; B rows),
`params.n` trajectories are run per prompt (rows repeated, interleaved), and the result has verl's keys
(postprocess.py) plus the input rows' fields, with metrics in `batch.meta["metrics"]`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from typing import Any, Sequence

from hybridrl.config.errors import ConfigError
from hybridrl.rollout.agent.base import AgentLoopContext, plain
from hybridrl.rollout.agent.chat_tokens import ChatRenderer
from hybridrl.rollout.agent.metrics import agent_loop_metrics
from hybridrl.rollout.agent.output import AgentLoopOutput
from hybridrl.rollout.agent.parsers import get_tool_parser
from hybridrl.rollout.agent.postprocess import outputs_to_batch
from hybridrl.rollout.agent.registry import AgentLoopSpec, agent_loop_specs
from hybridrl.rollout.agent.traced_rows import TrajectoryTrace, plan_traces, root_inputs, root_outputs
from hybridrl.rollout.base import RequestEngine, SamplingParams
from hybridrl.rollout.interactions.registry import load_interactions
from hybridrl.rollout.tools.executors import ToolExecutors
from hybridrl.rollout.tools.registry import load_all_tools
from hybridrl.rollout.tools.session import TRUNCATE_SIDES, ToolSettings
from hybridrl.rollout.trace import RolloutTracer, TraceSettings
from hybridrl.utils.batch import Batch


logger = logging.getLogger("hybridrl.rollout.agent")


class AgentLoopError(RuntimeError):
    """An agent loop failed on a row; the message names the loop and the row."""


def sampling_params_from_config(rollout_config: Any, *, validate: bool, seed: int | None = None,
                                eos_token_ids: Sequence[int] = ()) -> SamplingParams:
    """`rollout.*` sampling for training, `rollout.val_kwargs.*` for validation (verl's override)."""
    source = rollout_config.val_kwargs if validate else rollout_config
    return SamplingParams(temperature=source.temperature, top_k=source.top_k, top_p=source.top_p,
                          do_sample=source.do_sample, n=source.n, max_new_tokens=rollout_config.response_length,
                          ignore_eos=rollout_config.ignore_eos, eos_token_ids=tuple(eos_token_ids), seed=seed)


def check_agent_settings(rollout_config: Any) -> None:
    """The agent-loop keys' value rules; one ConfigError naming every key to change."""
    prefix = "actor_rollout_ref.rollout"
    multi_turn = rollout_config.multi_turn
    rules = [(f"{prefix}.multi_turn.max_parallel_calls", multi_turn.max_parallel_calls, 1, "a count >= 1"),
             (f"{prefix}.multi_turn.max_tool_response_length", multi_turn.max_tool_response_length, 1, "characters >= 1"),
             (f"{prefix}.multi_turn.tool_call_timeout", multi_turn.tool_call_timeout, 1e-9, "seconds > 0"),
             (f"{prefix}.multi_turn.max_assistant_turns", multi_turn.max_assistant_turns, 1, "null or >= 1"),
             (f"{prefix}.multi_turn.max_user_turns", multi_turn.max_user_turns, 1, "null or >= 1"),
             (f"{prefix}.agent.num_workers", rollout_config.agent.num_workers, 1, "a count >= 1"),
             (f"{prefix}.response_length", rollout_config.response_length, 1, "tokens >= 1"),
             (f"{prefix}.prompt_length", rollout_config.prompt_length, 1, "tokens >= 1")]
    problems = [f"{key}={value!r} must be {rule}" for key, value, least, rule in rules
                if value is not None and value < least]
    if multi_turn.tool_response_truncate_side not in TRUNCATE_SIDES:
        problems.append(f"{prefix}.multi_turn.tool_response_truncate_side={multi_turn.tool_response_truncate_side!r} "
                        f"must be one of {'|'.join(TRUNCATE_SIDES)}")
    if problems:
        raise ConfigError("; ".join(problems))


class AgentLoopManager:
    """Built once per run (tools load once); `generate` / `generate_sequences` once per step; `close` at the end.

    `rollout_config`: `actor_rollout_ref.rollout` (prompt_length, response_length, multi_turn.*, agent.*,
    val_kwargs). `chat_template_kwargs`: `data.apply_chat_template_kwargs`. `model_type`: the policy's HF
    `config.model_type` (picks the turn-boundary hook). The tokenizer should already carry
    `model.custom_chat_template` when one is set (hybridrl.models.hf.load_tokenizer applies it)."""

    def __init__(self, engine: RequestEngine, tokenizer: Any, rollout_config: Any, *,
                 chat_template_kwargs: dict | None = None, model_type: str | None = None):
        multi_turn, agent = rollout_config.multi_turn, rollout_config.agent
        check_agent_settings(rollout_config)
        get_tool_parser(multi_turn.format, tokenizer)
        self.rollout_config = rollout_config
        self.tokenizer = tokenizer
        self.pad_token_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        self.specs: dict[str, AgentLoopSpec] = agent_loop_specs(agent.agent_loop_config_path)
        self.default_agent_loop = agent.default_agent_loop
        if self.default_agent_loop not in self.specs:
            raise ValueError(f"actor_rollout_ref.rollout.agent.default_agent_loop={self.default_agent_loop!r} is not "
                             f"an agent loop; known: {sorted(self.specs)}")
        interactions = load_interactions(multi_turn.interaction_config_path)
        if interactions and self.default_agent_loop == "single_turn_agent":
            # verl's interaction rows name no loop (its multi-turn SGLang rollout ran every row with the interaction);
            # tool_agent is the loop that drives interactions, so rows without agent_name run it.
            logger.info("multi_turn.interaction_config_path is set: rows without agent_name run tool_agent (the loop "
                        "that drives interactions) instead of agent.default_agent_loop=single_turn_agent")
            self.default_agent_loop = "tool_agent"
        self.tracer = RolloutTracer(TraceSettings.from_config(rollout_config), tokenizer)
        self.executors = ToolExecutors(agent.num_workers)
        self.context = AgentLoopContext(
            engine=engine, tokenizer=tokenizer, rollout_config=rollout_config,
            renderer=ChatRenderer(tokenizer, chat_template_kwargs, model_type),
            tools=load_all_tools(multi_turn.tool_config_path, multi_turn.function_tool_path),
            executors=self.executors,
            tool_settings=ToolSettings(max_response_chars=multi_turn.max_tool_response_length,
                                       truncate_side=multi_turn.tool_response_truncate_side,
                                       timeout_s=multi_turn.tool_call_timeout),
            interactions=interactions, tracer=self.tracer)
        self._event_loop: asyncio.AbstractEventLoop | None = None

    @classmethod
    def from_config(cls, cfg: Any, engine: RequestEngine, tokenizer: Any, model_type: str | None = None) -> "AgentLoopManager":
        """From the whole run config (`HybridRLConfig`)."""
        return cls(engine, tokenizer, cfg.actor_rollout_ref.rollout,
                   chat_template_kwargs=cfg.data.apply_chat_template_kwargs, model_type=model_type)

    # ------------------------------------------------------------ entry points
    def generate_sequences(self, prompts: Batch, params: SamplingParams | None = None) -> Batch:
        """`generate` from synchronous code, on this manager's own event loop (kept across steps so an engine
        front end bound to it stays usable)."""
        return self.generate_trajectories(prompts, params)[0]

    def generate_trajectories(self, prompts: Batch, params: SamplingParams | None = None
                              ) -> tuple[Batch, list[AgentLoopOutput]]:
        """`generate_sequences`, with each trajectory's `AgentLoopOutput` (row order) beside the batch."""
        if self._event_loop is None:
            self._event_loop = asyncio.new_event_loop()
        return self._event_loop.run_until_complete(self._generate(prompts, params))

    async def generate(self, prompts: Batch, params: SamplingParams | None = None) -> Batch:
        """Run `params.n` trajectories per prompt row. Without `params`, sampling comes from `rollout.*`, or from
        `rollout.val_kwargs.*` when `prompts.meta["validate"]` is true."""
        return (await self._generate(prompts, params))[0]

    async def _generate(self, prompts: Batch, params: SamplingParams | None) -> tuple[Batch, list[AgentLoopOutput]]:
        start = time.perf_counter()
        if params is None:
            params = sampling_params_from_config(self.rollout_config, validate=bool(prompts.meta.get("validate")))
        rows = prompts.repeat(params.n, interleave=True) if params.n > 1 else prompts
        outputs = await self._run_all(rows, params, prompts.meta)
        batch = self._assemble(rows, outputs)
        metrics = agent_loop_metrics(outputs)
        metrics["timing_s/agent_loop"] = time.perf_counter() - start
        batch.meta.update(prompts.meta)
        batch.meta["metrics"] = metrics
        batch.meta["temperature"] = params.temperature if not params.greedy else 1.0
        return batch, outputs

    def close(self) -> None:
        self.executors.shutdown()
        self.tracer.close()
        if self._event_loop is not None:
            self._event_loop.close()
            self._event_loop = None

    # ------------------------------------------------------------ pieces
    async def _run_all(self, rows: Batch, params: SamplingParams, meta: dict[str, Any]) -> list[AgentLoopOutput]:
        fields = {key: rows.non_tensors[key] for key in rows.non_tensors}
        row_fields = [{key: values[i] for key, values in fields.items()} for i in range(len(rows))]
        traces = plan_traces(self.tracer, row_fields, params.n, params.row_offset, meta)
        tasks = [asyncio.ensure_future(self._run_row(i, row, dataclasses.replace(params, n=1, row_offset=params.row_offset + i),
                                                     traces[i]))
                 for i, row in enumerate(row_fields)]
        try:
            return list(await asyncio.gather(*tasks))
        except BaseException:  # one failed row fails the step: stop the others (their engine requests are aborted)
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            raise

    async def _run_row(self, index: int, row: dict[str, Any], params: SamplingParams,
                       trace: TrajectoryTrace = TrajectoryTrace()) -> AgentLoopOutput:
        name = row.get("agent_name") or self.default_agent_loop
        spec = self.specs.get(name)
        where = f"agent loop {name!r} on row {index} (data_source={row.get('data_source')!r}, index={row.get('index')!r})"
        if spec is None:
            raise AgentLoopError(f"row {index} has agent_name={name!r}, which is not an agent loop; known: "
                                 f"{sorted(self.specs)} (add it with rollout.agent.agent_loop_config_path)")
        with self.tracer.trajectory(trace.traced, trace.tags, root_inputs(row) if trace.traced else {}) as root:
            try:
                output = await spec.cls(self.context, **spec.options).run(params, **row)
            except asyncio.CancelledError:
                raise
            except Exception as error:
                raise AgentLoopError(f"{where} failed: {type(error).__name__}: {error}") from error
            if not isinstance(output, AgentLoopOutput):
                raise AgentLoopError(f"{where} returned {type(output).__name__}, not an AgentLoopOutput")
            if trace.traced:
                root.set_outputs(root_outputs(self.tracer, output))
        output.check(self.rollout_config.response_length, where)
        return output

    def _assemble(self, rows: Batch, outputs: list[AgentLoopOutput]) -> Batch:
        produced = outputs_to_batch(outputs, self.rollout_config.prompt_length, self.rollout_config.response_length,
                                    self.pad_token_id)
        produced["extra_info"] = [_reward_extra_info(info, output) for info, output in
                                  zip(rows.get("extra_info", [None] * len(outputs)), outputs)]
        kept = Batch(non_tensors=dict(rows.non_tensors))
        return kept.union(produced)


def _reward_extra_info(extra_info: Any, output: AgentLoopOutput) -> dict[str, Any]:
    """The row's extra_info plus what a reward function needs from the trajectory (verl passes these too):
    `num_turns`, `tool_rewards` (each call's step reward), `tool_reward_scores` (calc_reward by tool) and, with
    an interaction, `turn_scores` (the simulated user's score of each model turn it answered; verl hands the
    loop's extra fields to the reward function the same way, and leaves combining them to that function) and
    `interaction_metrics` (each reply's metrics dict)."""
    info = dict(plain(extra_info)) if isinstance(extra_info, dict) else {}
    info["num_turns"] = output.num_turns
    for key in ("tool_rewards", "tool_reward_scores", "turn_scores", "interaction_metrics"):
        if key in output.extra_fields:
            info[key] = output.extra_fields[key]
    return info
