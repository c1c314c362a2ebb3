"""Load the tools a veRL tool config names, as veRL's registry does, so that a veRL user's tool
config and tool files run unchanged.

The layout (veRL's `initialize_tools_from_config`: verl/tools/utils/tool_registry.py in 0.6.1,
verl/tools/tool_registry.py in 0.9.1; its example
examples/sglang_multiturn/config/tool_config/gsm8k_tool_config.yaml):

    tools:
      - class_name: "verl.tools.gsm8k_tool.Gsm8kTool"   # module.Class, importable
        config:                                        # given to the constructor as a dict
          type: native                                 # the only type Pivot runs
        tool_schema:                                   # OpenAIFunctionToolSchema
          type: "function"
          function: {name: ..., description: ..., parameters: {...}}

What veRL requires, and so does this: `tools` a list; each entry's `class_name`, and
`config.type`, which must name a tool type (veRL 0.6.1 also has "mcp", which needs MCP servers,
and 0.9.1 dropped it; Pivot has only "native"). `tool_schema` may be absent or null: veRL then
passes `tool_schema=None` and the class supplies its own schema. The tool's name is the `name`
its constructor sets (BaseTool: the schema's function name). veRL reads the file with OmegaConf
(so `${...}` interpolations resolve); this reads plain YAML.

Every problem is a `ConfigError` of one line naming the file, the entry and what is wrong.
"""

from __future__ import annotations

import copy
import importlib
import os
import sys
from pathlib import Path
from typing import Any

import yaml

from pivot.bad_input import ConfigError
from pivot.tools.verl_compat import ensure_verl_importable

TOOL_TYPES = ("native",)
"""The `config.type` values Pivot runs."""
METHODS = ("create", "execute", "calc_reward", "release")
"""What the runner calls on a tool (veRL's BaseTool has them all)."""


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return f"{type(e).__name__}: {text.splitlines()[0]}" if text else type(e).__name__


def _read(path: Path) -> list[Any]:
    where = f"tools config {path}"
    if not path.is_file():
        raise ConfigError(f"{where}: no such file")
    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as e:
        raise ConfigError(f"{where}: cannot be read as YAML: {_first_line(e)}") from None
    if not isinstance(data, dict) or not isinstance(data.get("tools"), list):
        raise ConfigError(f"{where}: expected a mapping with a `tools:` list (veRL's layout)")
    return data["tools"]


def _current_directory_importable() -> None:
    # veRL is launched from the project (`python -m verl.trainer.main_ppo`), which puts the
    # current directory first on sys.path, so a project's tool module imports by its name;
    # torchrun runs pivot/main.py as a script, which puts pivot/ there instead. Appended, so it
    # never shadows an installed package.
    if "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.append(os.getcwd())


def _import_class(class_name: str, at: str) -> Any:
    module_name, _, attr = class_name.rpartition(".")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        if e.name and module_name.startswith(e.name):
            raise ConfigError(
                f"{at}: class_name {class_name!r}: no module named {e.name!r} "
                "(is it on PYTHONPATH or under the current directory?)"
            ) from None
        raise ConfigError(
            f"{at}: class_name {class_name!r}: importing {module_name} failed: {_first_line(e)}"
        ) from None
    except Exception as e:  # the tool's module itself failed while importing
        raise ConfigError(
            f"{at}: class_name {class_name!r}: importing {module_name} failed: {_first_line(e)}"
        ) from None
    cls = getattr(module, attr, None)
    if cls is None or not callable(cls):
        raise ConfigError(f"{at}: class_name {class_name!r}: {module_name} has no class {attr!r}")
    for method in METHODS:
        if not callable(getattr(cls, method, None)):
            raise ConfigError(f"{at}: class_name {class_name!r} has no method {method}()")
    return cls


def _schema(entry: dict[str, Any], schema_cls: Any, at: str) -> Any:
    raw = entry.get("tool_schema")
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise ConfigError(f"{at}: tool_schema must be a mapping, got {type(raw).__name__}")
    try:
        return schema_cls.model_validate(raw)
    except Exception as e:  # pydantic's ValidationError: say its first problem
        errors = getattr(e, "errors", None)
        if not callable(errors):
            raise ConfigError(f"{at}: tool_schema: {_first_line(e)}") from None
        found = errors()
        first = found[0]
        field = ".".join(str(p) for p in first.get("loc", ()))
        more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
        raise ConfigError(f"{at}: tool_schema.{field}: {first.get('msg', '')}{more}") from None


def load_tools(config_file: str | Path) -> dict[str, Any]:
    """The tools of a veRL tool config, by name, in the file's order (the module docstring has
    the layout). Raises ConfigError (one line: file, entry, problem) on any bad input."""
    path = Path(config_file)
    entries = _read(path)
    ensure_verl_importable()
    _current_directory_importable()
    schema_cls = importlib.import_module("verl.tools.schemas").OpenAIFunctionToolSchema
    tools: dict[str, Any] = {}
    index: dict[str, int] = {}
    for i, entry in enumerate(entries):
        at = f"tools config {path}: tools[{i}]"
        if not isinstance(entry, dict):
            raise ConfigError(f"{at}: expected a mapping with class_name, config, tool_schema")
        class_name = entry.get("class_name")
        if not isinstance(class_name, str) or "." not in class_name.strip(". "):
            raise ConfigError(f"{at}: class_name must be module.Class, got {class_name!r}")
        config = entry.get("config")
        if not isinstance(config, dict):
            raise ConfigError(f"{at}: config must be a mapping with `type: native`")
        if config.get("type") not in TOOL_TYPES:
            raise ConfigError(
                f"{at}: config.type={config.get('type')!r}: Pivot runs {', '.join(TOOL_TYPES)} "
                "tools only"
            )
        cls = _import_class(class_name, at)
        schema = _schema(entry, schema_cls, at)
        try:
            # a copy: a tool that keeps and changes its config cannot change the next one's
            tool = cls(config=copy.deepcopy(config), tool_schema=schema)
        except Exception as e:
            raise ConfigError(
                f"{at}: {class_name}(config, tool_schema): {_first_line(e)}"
            ) from None
        name = getattr(tool, "name", None)
        if not isinstance(name, str) or not name:
            raise ConfigError(f"{at}: {class_name} sets no tool name (self.name)")
        if schema_of(tool) is None:
            raise ConfigError(
                f"{at}: {class_name} has no schema: give the entry a tool_schema, or set "
                "self.tool_schema in the class"
            )
        if name in tools:
            raise ConfigError(f"{at}: tool name {name!r} is already used by tools[{index[name]}]")
        tools[name] = tool
        index[name] = i
    return tools


def schema_of(tool: Any) -> Any:
    """A tool's schema object: its `tool_schema` (what veRL's agent loop reads), else what its
    `get_openai_tool_schema()` returns; None when it has neither."""
    schema = getattr(tool, "tool_schema", None)
    getter = getattr(tool, "get_openai_tool_schema", None)
    if schema is None and callable(getter):
        schema = getter()
    return schema


def tool_schemas(tools: dict[str, Any]) -> list[dict[str, Any]]:
    """The tools' OpenAI schemas as a chat template's `tools=` takes them, in `tools`' order:
    each tool's schema dumped with only the fields its config set
    (`model_dump(exclude_unset=True, exclude_none=True)`), as veRL's agent loop hands them to
    the template; a schema kept as a plain dict is given as it is."""
    out: list[dict[str, Any]] = []
    for name, tool in tools.items():
        schema = schema_of(tool)
        if isinstance(schema, dict):
            out.append(copy.deepcopy(schema))
        elif schema is not None:
            out.append(schema.model_dump(exclude_unset=True, exclude_none=True))
        else:
            raise ValueError(f"tool {name!r} has no schema")
    return out
