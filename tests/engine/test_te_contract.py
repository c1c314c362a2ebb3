"""Pivot's transformer-engine call sites against TE 2.9.0's own source, read with `ast` and never
imported. The Python package `transformer_engine/pytorch/` ships in the pure-Python
`transformer-engine` wheel (py3-none-any, ~0.7 MB); the `transformer_engine_torch` sdist holds only
the C++ extension, and `transformer-engine-cu13` the core library. So the wheel is what
`import transformer_engine.pytorch as te; te.Linear(...)` runs, and the oracle here."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from pivot.kernels import KERNELS
from tests.conftest import ROOT
from tests.engine.sglang_source import Source, fetch_wheel, params

LINEAR = "transformer_engine/pytorch/module/linear.py"
BASE = "transformer_engine/pytorch/module/base.py"


@pytest.fixture(scope="module")
def te() -> Source:
    return Source(fetch_wheel("transformer-engine", "2.9.0"))


def _te_aliases(tree: ast.Module) -> set[str]:
    """Names bound to `transformer_engine.pytorch` by `import transformer_engine.pytorch as X`."""
    return {
        a.asname or a.name
        for n in ast.walk(tree)
        if isinstance(n, ast.Import)
        for a in n.names
        if a.name == "transformer_engine.pytorch"
    }


def _te_calls() -> list[tuple[Path, ast.Call]]:
    """Every `<te alias>.<attr>(...)` call in pivot/."""
    out = []
    for path in sorted((ROOT / "pivot").rglob("*.py")):
        tree = ast.parse(path.read_text())
        aliases = _te_aliases(tree)
        out += [
            (path, n)
            for n in ast.walk(tree)
            if isinstance(n, ast.Call)
            and isinstance(n.func, ast.Attribute)
            and isinstance(n.func.value, ast.Name)
            and n.func.value.id in aliases
        ]
    return out


def _init(te: Source) -> ast.FunctionDef:
    fn = te.method(LINEAR, "Linear", "__init__")
    assert isinstance(fn, ast.FunctionDef)
    return fn


def _defaults(fn: ast.FunctionDef) -> dict[str, object]:
    a = fn.args
    named = a.args[len(a.args) - len(a.defaults) :]
    return {
        p.arg: ast.literal_eval(d) for p, d in zip(named, a.defaults) if isinstance(d, ast.Constant)
    }


@pytest.mark.slow
def test_te_linear_is_the_class_pivot_imports(te: Source) -> None:
    # transformer_engine/pytorch/__init__.py:28 and module/__init__.py:7 re-export module/linear.py's Linear
    assert "from transformer_engine.pytorch.module import Linear" in te.text(
        "transformer_engine/pytorch/__init__.py"
    )
    assert "from .linear import Linear" in te.text("transformer_engine/pytorch/module/__init__.py")
    module, attr, _, _ = KERNELS["te"]  # what the start-up check imports is what the model calls
    assert (module, attr) == ("transformer_engine.pytorch", "Linear")
    calls = _te_calls()
    assert calls, "pivot/ no longer calls transformer_engine.pytorch"
    assert {c.func.attr for _, c in calls} == {attr}, [ast.unparse(c) for _, c in calls]  # type: ignore[attr-defined]
    # importing it needs the compiled torch extension (linear.py:13, base.py:21): the start-up check
    # imports the module rather than looking for files, so a source-only install is caught there
    assert "import transformer_engine_torch as tex" in te.text(LINEAR)


@pytest.mark.slow
def test_pivot_calls_match_the_constructor(te: Source) -> None:
    fn = _init(te)
    names, has_kwargs = params(fn)
    assert names[:3] == ["self", "in_features", "out_features"] and not has_kwargs
    for path, call in _te_calls():
        where = f"{path.relative_to(ROOT)}: {ast.unparse(call)}"
        assert len(call.args) <= 2, where  # the rest of TE's parameters are not in torch's order
        assert {k.arg for k in call.keywords} <= set(names), where
        assert "bias" in {k.arg for k in call.keywords}, (
            where
        )  # TE's default is bias=True, like torch
        assert "device" in {k.arg for k in call.keywords}, (
            where
        )  # TE's default is "cuda": see below


def test_defaults_give_torch_linear_semantics(te: Source) -> None:
    """What Pivot leaves at TE's defaults makes te.Linear a drop-in for nn.Linear: one `weight`
    [out, in] and one `bias` parameter (the HF names Pivot loads and publishes), a plain tensor
    out of forward, no TP inside TE (Pivot shards from outside), fp32 parameters until Pivot's
    `.to(dtype)`."""
    d = _defaults(_init(te))
    assert d["parameters_split"] is None and d["return_bias"] is False and d["tp_size"] == 1
    assert d["parallel_mode"] is None and d["tp_group"] is None and d["params_dtype"] is None
    src = ast.unparse(_init(te))
    assert (
        "self.weight_names = ['weight']" in src and "self.bias_names = ['bias']" in src
    )  # ast.unparse quotes
    assert "torch.empty(self.out_features, self.in_features" in src  # nn.Linear's [out, in] layout
    assert (
        "params_dtype = torch.get_default_dtype() if params_dtype is None else params_dtype" in src
    )


def test_forward_takes_one_tensor_and_returns_one(te: Source) -> None:
    fn = te.method(LINEAR, "Linear", "forward")
    a = fn.args
    assert [p.arg for p in a.args[:2]] == ["self", "inp"]
    assert (
        len(a.defaults) == len(a.args) - 2
    )  # everything after `inp` is optional: Pivot calls module(x)
    returns = [
        ast.unparse(n.value)
        for n in ast.walk(fn)
        if isinstance(n, ast.Return) and n.value is not None
    ]
    assert "out" in returns  # return_bias=False (Pivot's default) returns the output alone
    # any leading dims ([B, T, H] from Pivot): only the last must equal in_features (linear.py:131)
    assert "assert inp.shape[-1] == in_features" in te.text(LINEAR)


def test_device_default_is_cuda_not_the_torch_default(te: Source) -> None:
    """Why Pivot's call sites pass `device`: TE allocates on "cuda" whatever `torch.device(...)`
    context is active (an explicit device beats the context), and only `device="meta"` defers
    initialisation (linear.py:1321). Without it, each weight built under `params_on_meta()` was
    created and initialised whole on the GPU, then moved to meta (test_te_linear_device.py)."""
    d = _defaults(_init(te))
    assert d["device"] == "cuda"
    assert "self.reset_parameters(defer_init=device == 'meta')" in ast.unparse(_init(te))
    # TE's register_parameter forwards to nn.Module's (base.py:1240), which params_on_meta patches
    reg = ast.unparse(te.method(BASE, "TransformerEngineBaseModule", "register_parameter"))
    assert "super().register_parameter(name, param)" in reg
