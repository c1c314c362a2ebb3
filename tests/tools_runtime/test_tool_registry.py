"""`load_tools` on veRL's tool-config layout: good configs load, and every bad one stops in one
line that names the file, the entry and the problem."""

from __future__ import annotations

import itertools
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from pivot.bad_input import ConfigError
from pivot.tools.registry import load_tools, tool_schemas

_ids = itertools.count()

SCHEMA = """
    tool_schema:
      type: function
      function:
        name: {name}
        description: a test tool
        parameters:
          type: object
          properties:
            x: {{type: string, description: the input}}
          required: [x]
"""

GOOD_CLASS = """
class Echo:
    def __init__(self, config, tool_schema):
        self.config = config
        self.tool_schema = tool_schema
        self.name = tool_schema.function.name if tool_schema is not None else "echo"

    async def create(self, instance_id=None, **kwargs):
        return "i", None

    async def execute(self, instance_id, parameters, **kwargs):
        return str(parameters), 0.0, {}

    async def calc_reward(self, instance_id, **kwargs):
        return 0.0

    async def release(self, instance_id, **kwargs):
        return None
"""


@pytest.fixture
def tool_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A fresh importable module holding GOOD_CLASS (and whatever a test appends); its name."""
    name = f"pivot_test_tools_{next(_ids)}"
    (tmp_path / f"{name}.py").write_text(GOOD_CLASS)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield name
    sys.modules.pop(name, None)


def _config(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "tools.yaml"
    path.write_text(textwrap.dedent(text))
    return path


def _entry(cls: str, name: str = "echo", type_: str = "native", schema: bool = True) -> str:
    text = f'  - class_name: "{cls}"\n    config:\n      type: {type_}\n'
    return text + (SCHEMA.format(name=name)[1:] if schema else "")


def _error(path: Path) -> str:
    with pytest.raises(ConfigError) as info:
        load_tools(path)
    message = str(info.value)
    assert "\n" not in message
    assert str(path) in message
    return message


def test_loads_tools_by_name_with_their_config(tmp_path: Path, tool_module: str) -> None:
    path = _config(
        tmp_path,
        "tools:\n"
        + _entry(f"{tool_module}.Echo", "first")
        + _entry(f"{tool_module}.Echo", "second"),
    )
    tools = load_tools(str(path))
    assert list(tools) == ["first", "second"]
    assert tools["first"].config == {"type": "native"}
    assert type(tools["first"].tool_schema).__name__ == "OpenAIFunctionToolSchema"
    assert tool_schemas(tools)[1] == {
        "type": "function",
        "function": {
            "name": "second",
            "description": "a test tool",
            "parameters": {
                "type": "object",
                "properties": {"x": {"type": "string", "description": "the input"}},
                "required": ["x"],
            },
        },
    }


def test_no_tool_schema_passes_none_as_verl_does(tmp_path: Path) -> None:
    # veRL passes tool_schema=None for an entry without one; the class supplies its own
    from pivot.tools.calculator import SCHEMA

    path = _config(
        tmp_path, "tools:\n" + _entry("pivot.tools.calculator.CalculatorTool", schema=False)
    )
    tools = load_tools(path)
    assert list(tools) == ["calc"]
    assert tool_schemas(tools) == [SCHEMA]


def test_file_problems(tmp_path: Path) -> None:
    assert _error(tmp_path / "absent.yaml").endswith("absent.yaml: no such file")
    assert "cannot be read as YAML" in _error(_config(tmp_path, "tools: [\n"))
    assert "expected a mapping with a `tools:` list" in _error(_config(tmp_path, "tool: []\n"))
    assert "expected a mapping with a `tools:` list" in _error(_config(tmp_path, "- a\n"))


@pytest.mark.parametrize(
    "entry, expected",
    [
        ("  - just a string\n", "tools[0]: expected a mapping with class_name"),
        ("  - config: {type: native}\n", "tools[0]: class_name must be module.Class, got None"),
        ("  - class_name: Echo\n    config: {type: native}\n", "class_name must be module.Class"),
        ("  - class_name: a.B\n", "tools[0]: config must be a mapping with `type: native`"),
        ("  - class_name: a.B\n    config: {}\n", "tools[0]: config.type=None: Pivot runs native"),
        ("  - class_name: a.B\n    config: {type: mcp}\n", "config.type='mcp': Pivot runs native"),
    ],
)
def test_entry_layout_problems(tmp_path: Path, entry: str, expected: str) -> None:
    assert expected in _error(_config(tmp_path, "tools:\n" + entry))


def test_class_problems(tmp_path: Path, tool_module: str) -> None:
    def error_for(cls: str, schema: bool = True) -> str:
        return _error(_config(tmp_path, "tools:\n" + _entry(cls, schema=schema)))

    assert "tools[0]: class_name 'no_such_module_xyz.Tool': no module named" in error_for(
        "no_such_module_xyz.Tool"
    )
    assert f"{tool_module} has no class 'Missing'" in error_for(f"{tool_module}.Missing")

    module = tmp_path / f"{tool_module}.py"
    module.write_text(GOOD_CLASS + "\nclass NoExecute:\n    async def create(self): ...\n")
    sys.modules.pop(tool_module, None)
    assert "class_name 'pivot_test_tools" in error_for(f"{tool_module}.NoExecute")
    assert "has no method execute()" in error_for(f"{tool_module}.NoExecute")

    module.write_text(GOOD_CLASS + "\nraise RuntimeError('cannot start\\nsecond line')\n")
    sys.modules.pop(tool_module, None)
    assert f"importing {tool_module} failed: RuntimeError: cannot start" in error_for(
        f"{tool_module}.Echo"
    )

    module.write_text(
        GOOD_CLASS + "\nclass Broken(Echo):\n    def __init__(self, **kw):\n"
        "        raise KeyError('api_key')\n"
    )
    sys.modules.pop(tool_module, None)
    assert "tools[0]: " in error_for(f"{tool_module}.Broken")
    assert "(config, tool_schema): KeyError: 'api_key'" in error_for(f"{tool_module}.Broken")

    module.write_text(
        GOOD_CLASS + "\nclass NoSchema(Echo):\n    tool_schema = None\n"
        "    def __init__(self, config, tool_schema):\n        self.name = 'n'\n"
    )
    sys.modules.pop(tool_module, None)
    assert "NoSchema has no schema" in error_for(f"{tool_module}.NoSchema", schema=False)


def test_bad_schema_and_duplicate_names(tmp_path: Path, tool_module: str) -> None:
    bad = (
        f'  - class_name: "{tool_module}.Echo"\n    config: {{type: native}}\n'
        "    tool_schema:\n      type: function\n      function: {description: no name}\n"
    )
    message = _error(_config(tmp_path, "tools:\n" + bad))
    assert "tools[0]: tool_schema.function.name: Field required" in message

    twice = (
        "tools:\n" + _entry(f"{tool_module}.Echo", "same") + _entry(f"{tool_module}.Echo", "same")
    )
    message = _error(_config(tmp_path, twice))
    assert "tools[1]: tool name 'same' is already used by tools[0]" in message


def test_current_directory_is_importable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # as veRL launched from a project (`python -m ...`): a tool module in the current directory
    project = tmp_path / "project"
    project.mkdir()
    (project / "my_project_tools_q.py").write_text(GOOD_CLASS)
    monkeypatch.chdir(project)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(project))])
    try:
        path = _config(tmp_path, "tools:\n" + _entry("my_project_tools_q.Echo"))
        assert list(load_tools(path)) == ["echo"]
    finally:
        sys.modules.pop("my_project_tools_q", None)
