"""Records tools exchange with the agent loop: the OpenAI function schema a tool declares, and its response.

verl keeps these as pydantic models (`verl.tools.schemas`); here they are dataclasses with the same field
names, so a verl tool's `ToolResponse(text=...)`, `self.tool_schema.function.name` and
`self.tool_schema.model_dump()` work unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

JSON_TYPES = ("string", "number", "integer", "boolean", "array", "object", "null")


class ToolSchemaError(ValueError):
    """A tool schema that is not an OpenAI function schema; the message names the tool and the field."""


@dataclass
class FunctionSchema:
    """`function` of an OpenAI tool schema: `parameters` is a JSON schema object (`properties`, `required`)."""

    name: str
    description: str = ""
    parameters: dict[str, Any] = field(default_factory=lambda: {"type": "object", "properties": {}, "required": []})
    strict: bool = False


@dataclass
class ToolSchema:
    """An OpenAI tool schema: `{"type": "function", "function": {"name", "description", "parameters"}}`."""

    function: FunctionSchema
    type: str = "function"

    @classmethod
    def from_dict(cls, data: dict[str, Any], where: str = "tool schema") -> "ToolSchema":
        """Check and build from the YAML / JSON form; `where` names the source in errors."""
        if not isinstance(data, dict) or not isinstance(data.get("function"), dict):
            raise ToolSchemaError(f"{where}: expected {{type: function, function: {{name, description, parameters}}}}, "
                                  f"got {str(data)[:200]!r}")
        if data.get("type", "function") != "function":
            raise ToolSchemaError(f"{where}: type={data.get('type')!r}; only OpenAI 'function' tools exist")
        function = data["function"]
        name = function.get("name")
        if not isinstance(name, str) or not name:
            raise ToolSchemaError(f"{where}: function.name must be a non-empty string, got {name!r}")
        parameters = function.get("parameters") or {"type": "object", "properties": {}}
        _check_parameters(parameters, f"{where} ({name})")
        return cls(function=FunctionSchema(name=name, description=str(function.get("description") or ""),
                                           parameters=dict(parameters), strict=bool(function.get("strict", False))))

    def to_dict(self) -> dict[str, Any]:
        """The schema as chat templates take it (`tools=[...]` of apply_chat_template)."""
        function: dict[str, Any] = {"name": self.function.name, "description": self.function.description,
                    "parameters": self.function.parameters}
        if self.function.strict:
            function["strict"] = True
        return {"type": self.type, "function": function}

    @classmethod
    def model_validate(cls, data: dict[str, Any]) -> "ToolSchema":
        """verl's pydantic spelling of `from_dict`."""
        return cls.from_dict(data)

    def model_dump(self, **_: Any) -> dict[str, Any]:
        """verl's pydantic spelling of `to_dict` (its tools call it)."""
        return self.to_dict()

    @property
    def name(self) -> str:
        return self.function.name


def _check_parameters(parameters: Any, where: str) -> None:
    if not isinstance(parameters, dict) or parameters.get("type", "object") != "object":
        raise ToolSchemaError(f"{where}: parameters must be a JSON schema of type 'object', got {str(parameters)[:200]!r}")
    properties = parameters.get("properties", {})
    if not isinstance(properties, dict):
        raise ToolSchemaError(f"{where}: parameters.properties must be a mapping of argument name to schema")
    for arg, spec in properties.items():
        kinds = spec.get("type") if isinstance(spec, dict) else None
        kinds = kinds if isinstance(kinds, list) else [kinds]
        if kinds != [None] and not all(kind in JSON_TYPES for kind in kinds):
            raise ToolSchemaError(f"{where}: argument {arg!r} has type {spec.get('type')!r}; JSON schema types are "
                                  f"{', '.join(JSON_TYPES)}")
    missing = [name for name in parameters.get("required", []) if name not in properties]
    if missing:
        raise ToolSchemaError(f"{where}: required arguments {missing} are not in parameters.properties")


@dataclass
class ToolResponse:
    """What a tool returns to the model. Only text reaches the model here (multimodal tool outputs would need a
    vision-language processor, which hybridrl does not have); an image or video is refused where it arrives."""

    text: str | None = None
    image: list[Any] | None = None
    video: list[Any] | None = None

    def is_empty(self) -> bool:
        return not self.text and not self.image and not self.video


# verl's names for the same records (`from verl.tools.schemas import OpenAIFunctionToolSchema, ToolResponse`).
OpenAIFunctionToolSchema = ToolSchema
OpenAIFunctionSchema = FunctionSchema


@dataclass
class ToolCall:
    """One call the model wrote: the tool's name, its arguments as the JSON text the model produced, the call id
    when the format has one, and `parse_error` when the call block itself could not be read."""

    name: str
    arguments: str = "{}"
    tool_call_id: str | None = None
    parse_error: str | None = None
