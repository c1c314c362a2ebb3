"""Pivot's stand-in for the veRL module `verl.tools.schemas`, used only when veRL itself does
not import (`pivot.tools.verl_compat`).

The OpenAI function-tool records a veRL tool file and tool config use, as pydantic models with
veRL's field names, types and defaults, so that `OpenAIFunctionToolSchema.model_validate(d)` on a
veRL tool config's `tool_schema` and `model_dump(exclude_unset=True, exclude_none=True)` give
what they give with veRL. Where 0.6.1 and 0.9.1 differ, the fields take 0.9.1's wider types (a
property's `type` may be a list of types, `enum` any JSON values, `required` may be left out), so
every schema either version accepts validates here.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, Field, model_validator


class OpenAIFunctionPropertySchema(BaseModel):
    """One parameter of a function: its JSON type, description and allowed values."""

    type: str | list[str]
    description: str | None = None
    enum: list[Any] | None = None


class OpenAIFunctionParametersSchema(BaseModel):
    """A function's parameters: a JSON object schema."""

    type: str
    properties: dict[str, OpenAIFunctionPropertySchema]
    required: list[str] = Field(default_factory=list)


def _no_parameters() -> OpenAIFunctionParametersSchema:
    return OpenAIFunctionParametersSchema(type="object", properties={}, required=[])


class OpenAIFunctionSchema(BaseModel):
    """A function a model may call: name, description, parameters."""

    name: str
    description: str
    parameters: OpenAIFunctionParametersSchema = Field(default_factory=_no_parameters)
    strict: bool = False


class OpenAIFunctionToolSchema(BaseModel):
    """A tool as a chat template's `tools=` lists it: {"type": "function", "function": ...}."""

    type: str
    function: OpenAIFunctionSchema


class OpenAIFunctionParsedSchema(BaseModel):
    """A call as parsed from the model's text: the name and the arguments' JSON text."""

    name: str
    arguments: str


class OpenAIFunctionCallSchema(BaseModel):
    """A call with its arguments decoded."""

    name: str
    arguments: dict[str, Any]

    @staticmethod
    def from_openai_function_parsed_schema(
        parsed_schema: OpenAIFunctionParsedSchema,
    ) -> tuple[OpenAIFunctionCallSchema, bool]:
        """The call with its arguments decoded, and whether decoding failed (the arguments are
        then {}): text that is not JSON, or JSON that is not an object, fails."""
        try:
            arguments = json.loads(parsed_schema.arguments)
        except json.JSONDecodeError:
            arguments = None
        failed = not isinstance(arguments, dict)
        call = OpenAIFunctionCallSchema(
            name=parsed_schema.name, arguments=arguments if isinstance(arguments, dict) else {}
        )
        return call, failed


class OpenAIFunctionToolCall(BaseModel):
    """A call as an assistant message's `tool_calls` holds it."""

    id: str
    type: Literal["function"] = "function"
    function: OpenAIFunctionCallSchema


class ToolResponse(BaseModel):
    """What a tool answers: text, and for a vision model images and videos (lists of them)."""

    text: str | None = None
    image: list[Any] | None = None
    video: list[Any] | None = None

    @model_validator(mode="before")
    @classmethod
    def _media_are_lists(cls, values: Any) -> Any:
        # a tool that returns one image rather than a list of one gets told how to fix it, as
        # veRL tells it, instead of pydantic's generic list error
        if isinstance(values, dict):
            for key in ("image", "video"):
                if key in values and not isinstance(values[key], list):
                    raise ValueError(
                        f"{key} must be a list, got {type(values[key]).__name__}: return "
                        f"ToolResponse({key}=[x]) for one, ToolResponse({key}=[x, y]) for several"
                    )
        return values

    def is_empty(self) -> bool:
        """No text, no image, no video."""
        return not self.text and not self.image and not self.video

    def is_text_only(self) -> bool:
        """Text and nothing else."""
        return bool(self.text) and not self.image and not self.video
