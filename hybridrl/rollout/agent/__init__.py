"""Agent loops: multi-turn trajectories (tool calls between turns) over the engine's request API.

`AgentLoopManager` turns a prompt batch into one training row per trajectory; `AgentLoopBase` is the
extension point (`run(sampling_params, **row) -> AgentLoopOutput`); built-ins are `single_turn_agent`
and `tool_agent`. See docs/agentic.md.
"""

from hybridrl.rollout.agent.base import AgentLoopBase, AgentLoopContext
from hybridrl.rollout.agent.manager import AgentLoopError, AgentLoopManager, sampling_params_from_config
from hybridrl.rollout.agent.metrics import agent_loop_metrics, batch_rollout_turns, rollout_turns
from hybridrl.rollout.agent.output import AgentLoopMetrics, AgentLoopOutput, Span, TokenStream
from hybridrl.rollout.agent.parsers import get_tool_parser, register_tool_parser
from hybridrl.rollout.agent.registry import register_agent_loop

__all__ = ["AgentLoopBase", "AgentLoopContext", "AgentLoopError", "AgentLoopManager", "AgentLoopMetrics",
           "AgentLoopOutput", "Span", "TokenStream", "agent_loop_metrics", "batch_rollout_turns", "get_tool_parser",
           "register_agent_loop", "register_tool_parser", "rollout_turns", "sampling_params_from_config"]
