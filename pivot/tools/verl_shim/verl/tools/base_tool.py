"""Pivot's stand-in for the veRL module `verl.tools.base_tool`, used only when veRL itself does
not import (`pivot.tools.verl_compat`).

`BaseTool` is the class a veRL tool file subclasses. Its contract, as veRL's agent loop and
multi-turn rollout use it: one tool object serves many trajectories, each its own *instance*
(an id the tool picks in `create`); `execute` answers one call of an instance with
`(ToolResponse, step reward, metrics)`; `calc_reward` is the instance's reward when its
trajectory ends; `release` forgets the instance. Every method is a coroutine.
"""

from __future__ import annotations

from typing import Any
from uuid import uuid4

from ..utils.rollout_trace import rollout_trace_op
from .schemas import OpenAIFunctionToolSchema, ToolResponse


class BaseTool:
    """A tool with veRL's constructor and methods; the defaults keep no state."""

    def __init__(self, config: dict, tool_schema: OpenAIFunctionToolSchema | None) -> None:
        self.config = config
        # veRL's registry passes None when the config entry has no tool_schema: the subclass
        # then supplies its own through get_openai_tool_schema
        schema = tool_schema if tool_schema is not None else self.get_openai_tool_schema()
        if schema is None:
            raise ValueError(
                f"{type(self).__name__}: no tool schema (give the config entry a tool_schema, "
                "or override get_openai_tool_schema)"
            )
        self.tool_schema: OpenAIFunctionToolSchema = schema
        self.name: str = schema.function.name

    def get_openai_tool_schema(self) -> OpenAIFunctionToolSchema | None:
        """The tool's schema in OpenAI's form (None before the constructor has set one)."""
        return getattr(self, "tool_schema", None)

    async def create(
        self, instance_id: str | None = None, **kwargs: Any
    ) -> tuple[str, ToolResponse]:
        """Start an instance for one trajectory: its id (`instance_id`, or a new one) and the
        tool's first response (empty here). veRL's agent loop passes the sample's per-tool
        `create_kwargs` as the keyword `create_kwargs`."""
        return (instance_id if instance_id is not None else str(uuid4())), ToolResponse()

    @rollout_trace_op
    async def execute(
        self, instance_id: str, parameters: dict[str, Any], **kwargs: Any
    ) -> tuple[ToolResponse, float, dict]:
        """Answer one call: the response, a step reward, and metrics."""
        return ToolResponse(text="Updated the tool state."), 0.0, {}

    async def calc_reward(self, instance_id: str, **kwargs: Any) -> float:
        """The instance's reward at the end of its trajectory."""
        return 0.0

    async def release(self, instance_id: str, **kwargs: Any) -> None:
        """Forget the instance."""
