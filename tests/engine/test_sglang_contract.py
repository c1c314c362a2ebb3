"""The sglang adapter against sglang 0.5.23's real source (the wheel, read with `ast`, never
imported): every method and keyword the adapter calls exists, the weight-update session and its
refusals are what the fake `sglang` models, and the tensor names Pivot publishes are names the
sglang model classes load. Nothing here runs sglang."""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path

import pytest

import pivot.engine.backends.sglang_adapter as adapter
import pivot.engine.backends.sglang_weights as sglang_weights
from pivot.engine import SamplingParams
from tests.engine import fake_sglang
from tests.engine.sglang_source import Source, fetch_wheel, params, returned_strings

ENGINE = "sglang/srt/entrypoints/engine.py"
MIXIN = "sglang/srt/managers/tokenizer_control_mixin.py"
TM = "sglang/srt/managers/tokenizer_manager.py"
UPDATER = "sglang/srt/managers/scheduler_components/weight_updater.py"
ENGINE_CLASSES = [(ENGINE, "Engine")]
TM_CLASSES = [(TM, "TokenizerManager"), (MIXIN, "TokenizerControlMixin")]


@pytest.fixture(scope="module")
def src() -> Source:
    return Source(fetch_wheel("sglang", "0.5.23"))


def adapter_calls() -> list[tuple[str, str, int, list[str]]]:
    """(receiver, method, positional count, keyword names) of every call the adapter and its
    weights module make on the sglang engine (`self.engine` / `engine`: "engine") and its
    `tokenizer_manager` ("tokenizer_manager")."""
    receivers = {
        "self.engine": "engine",
        "engine": "engine",
        "self.engine.tokenizer_manager": "tokenizer_manager",
        "engine.tokenizer_manager": "tokenizer_manager",
    }
    out = []
    for module in (adapter, sglang_weights):
        for node in ast.walk(ast.parse(Path(module.__file__).read_text())):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                continue
            kind = receivers.get(ast.unparse(node.func.value))
            if kind:
                out.append(
                    (kind, node.func.attr, len(node.args), [k.arg for k in node.keywords if k.arg])
                )
    return out


def test_tm_is_the_mixin(src: Source) -> None:
    bases = [ast.unparse(b) for b in src.cls(TM, "TokenizerManager").bases]
    assert "TokenizerControlMixin" in bases, bases


def test_every_call_the_adapter_makes_exists_with_its_keywords(src: Source) -> None:
    calls = adapter_calls()
    methods = {m for _, m, _, _ in calls}
    assert {
        "begin_weight_update",
        "end_weight_update",
        "update_weights_from_tensor",
        "release_memory_occupation",
        "resume_memory_occupation",
        "async_generate",
        "abort_request",
        "flush_cache",
    } <= methods, methods
    for kind, method, n_pos, keywords in calls:
        fn = src.find_method(ENGINE_CLASSES if kind == "engine" else TM_CLASSES, method)
        names, var_kw = params(fn)
        assert n_pos <= len(fn.args.posonlyargs + fn.args.args) - 1, (
            f"{kind}.{method}: {n_pos} positional arguments"
        )
        missing = [k for k in keywords if k not in names]
        assert var_kw or not missing, (
            f"{kind}.{method} has no keyword(s) {missing} in sglang 0.5.23 ({names})"
        )


def test_the_fake_has_the_same_signatures(src: Source) -> None:
    """What the tests' fake accepts is what sglang accepts (a keyword the adapter could pass to the
    fake but sglang would refuse is caught here, not on the first GPU run)."""
    for kind, method, _, _ in adapter_calls():
        real, _ = params(
            src.find_method(ENGINE_CLASSES if kind == "engine" else TM_CLASSES, method)
        )
        mine = list(inspect.signature(getattr(fake_sglang.FakeSglang, method)).parameters)
        assert set(mine) <= set(real), f"fake {method}{mine} vs sglang {real}"


def test_server_args_the_adapter_passes_exist(src: Source) -> None:
    fields = set()
    for path in sorted(
        n for n in src.names if n.startswith("sglang/srt/arg_groups/fields/") and n.endswith(".py")
    ):
        fields |= {
            n.target.id
            for n in ast.walk(src.tree(path))
            if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)
        }
    assert len(fields) > 100, "the ServerArgs field namespaces moved"
    fn = inspect.getsource(adapter.SglangEngine.from_pretrained)
    passed = set(re.findall(r"\b(\w+)=", fn.split("kwargs = dict(")[1].split(")\n")[0]))
    extra = {
        "mem_fraction_static",
        "enable_deterministic_inference",
    }  # tools/gpu_checks.py, the docstring
    assert passed and not (passed | extra) - fields, sorted((passed | extra) - fields)


def test_sampling_params_exist(src: Source) -> None:
    cls = src.cls("sglang/srt/sampling/sampling_params.py", "SamplingParams")
    fields = {
        n.target.id
        for n in cls.body
        if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)
    }
    eng = adapter.SglangEngine.__new__(adapter.SglangEngine)
    sent = eng._sampling(SamplingParams(max_new_tokens=8, seed=3, top_k=0), 0)
    assert set(sent) <= fields, set(sent) - fields
    assert sent["top_k"] == -1 and "self.top_k == -1" in src.text(
        "sglang/srt/sampling/sampling_params.py"
    )


def test_session_protocol_and_refusals_are_what_the_fake_models(src: Source) -> None:
    """The scheduler's session: begin refuses an open session, end and update refuse a closed
    one, each as success False with the message the fake returns."""
    for method, state, message in (
        ("begin_weight_update", "is not None", fake_sglang.SESSION_OPEN),
        ("end_weight_update", "is None", fake_sglang.NO_SESSION),
        ("update_weights_from_tensor", "is None", fake_sglang.UPDATE_OUTSIDE),
    ):
        fn = src.method(UPDATER, "SchedulerWeightUpdaterManager", method)
        first = (
            fn.body[1] if isinstance(fn.body[0], ast.Expr) else fn.body[0]
        )  # after the docstring
        assert isinstance(first, ast.If) and ast.unparse(first.test) == f"self._session {state}", (
            ast.unparse(first)
        )
        ret = first.body[0]
        assert isinstance(ret, ast.Return) and "success=False" in ast.unparse(ret)
        assert returned_strings(ret) == [message], method
    flush = src.method(UPDATER, "SchedulerWeightUpdaterManager", "flush_cache_after_weight_update")
    got = [
        "".join(
            n.value for n in ast.walk(t) if isinstance(n, ast.Constant) and isinstance(n.value, str)
        )
        for t in ast.walk(flush)
        if isinstance(t, ast.Tuple)
    ]
    assert fake_sglang.FLUSH_REFUSED in got


def test_weight_calls_answer_success_message_tuples(src: Source) -> None:
    for method in ("begin_weight_update", "end_weight_update", "update_weights_from_tensor"):
        fn = src.method(MIXIN, "TokenizerControlMixin", method)
        assert ast.unparse(fn.returns) == "Tuple[bool, str]", method
    merge = src.method("sglang/srt/managers/communicator.py", "FanOutCommunicator", "merge_results")
    assert ast.unparse(merge.body[-1]) == "return (all_success, all_message)"
    for method in ("begin_weight_update", "end_weight_update", "update_weights_from_tensor"):
        body = ast.unparse(src.method(ENGINE, "Engine", method))
        assert f"self.tokenizer_manager.{method}(obj, None)" in body, (
            method
        )  # the Engine passes the tuple on


def test_an_update_flush_refused_fails_the_update_and_release_needs_idle(src: Source) -> None:
    flush = ast.unparse(
        src.method(UPDATER, "SchedulerWeightUpdaterManager", "flush_cache_after_weight_update")
    )
    assert "return (False," in flush and "recv_req.flush_cache and (not self.flush_cache(" in flush
    release = src.method(UPDATER, "SchedulerWeightUpdaterManager", "release_memory_occupation")
    assert any(
        isinstance(n, ast.Assert) and "is_fully_idle" in ast.unparse(n) for n in release.body[:3]
    )
    idle = ast.unparse(src.method("sglang/srt/managers/scheduler.py", "Scheduler", "is_fully_idle"))
    assert (
        "self.result_queue" in idle and "self.last_batch" in idle
    )  # the overlap batch counts as busy
    wrapper = ast.unparse(
        src.method(
            "sglang/srt/managers/scheduler_components/flush_wrapper.py",
            "SchedulerFlushWrapper",
            "check_pending",
        )
    )
    assert "self._is_fully_idle()" in wrapper and "Timed out waiting for idle state." in wrapper
    out = src.cls("sglang/srt/managers/io_struct.py", "FlushCacheReqOutput")
    assert [ast.unparse(n.target) for n in out.body if isinstance(n, ast.AnnAssign)] == [
        "success",
        "message",
    ]


def test_streams_hold_the_update_lock_unless_generation_is_paused(src: Source) -> None:
    """Why the adapter pauses running requests in place around an update: a stream holds the
    reader side of the model-update lock for its whole life; the weight calls take the writer
    side only when generation is not paused, and a new request waits while it is."""
    gen = ast.unparse(src.method(TM, "TokenizerManager", "generate_request"))
    assert "async with self.model_update_lock.reader_lock:" in gen and "_wait_one_response" in gen
    assert "await self.is_pause_cond.wait_for(lambda: not self.is_pause)" in gen
    upd = ast.unparse(src.method(MIXIN, "TokenizerControlMixin", "update_weights_from_tensor"))
    session = ast.unparse(src.method(MIXIN, "TokenizerControlMixin", "_weight_update_session_call"))
    for body in (upd, session):
        assert "self.model_update_lock.writer_lock" in body and "if not is_paused:" in body


def test_pause_in_place_is_what_the_adapter_asks_for(src: Source) -> None:
    """`PauseGenerationReqInput(mode="in_place")` keeps the requests and their K/V in the
    scheduler (io_struct.py:1927-1946; scheduler.py:5817-5830), and the continue takes no
    argument the adapter must give."""
    io = "sglang/srt/managers/io_struct.py"
    pause = ast.unparse(src.cls(io, "PauseGenerationReqInput"))
    assert "mode: Literal['abort', 'retract', 'in_place']" in pause
    cont = src.cls(io, "ContinueGenerationReqInput")
    fields = [n for n in cont.body if isinstance(n, ast.AnnAssign)]
    assert all(f.value is not None for f in fields)  # every field has a default
    sched = ast.unparse(
        src.method("sglang/srt/managers/scheduler.py", "Scheduler", "pause_generation")
    )
    assert "if recv_req.mode == 'in_place':" in sched


def test_an_in_place_pause_leaves_the_last_batch_running(src: Source) -> None:
    """Why each bucket waits for the device (`sglang_weights.load_after_inflight`): the in-place
    pause returns without draining the overlap scheduler's result queue (retract does drain it);
    the paused loop launches nothing more; the event loop, weight copies included, runs on
    `schedule_stream`, whose fence on the last forward is the metadata-read event, recorded
    inside the graph for a decode batch by default."""
    sched = "sglang/srt/managers/scheduler.py"
    pause = src.method(sched, "Scheduler", "pause_generation")
    in_place = next(
        n
        for n in ast.walk(pause)
        if isinstance(n, ast.If) and ast.unparse(n.test) == "recv_req.mode == 'in_place'"
    )
    assert isinstance(in_place.body[-1], ast.Return) and "result_queue" not in ast.unparse(in_place)
    assert "self.result_queue.popleft()" in ast.unparse(pause)  # the retract path drains it
    loop = ast.unparse(src.method(sched, "Scheduler", "event_loop_overlap"))
    assert loop.index("if self._engine_paused:") < loop.index("continue") < loop.index("run_batch")
    assert "StreamContext(self.schedule_stream)" in ast.unparse(
        src.method(sched, "Scheduler", "run_event_loop")
    )
    war = ast.unparse(src.method(sched, "Scheduler", "_apply_war_barrier"))
    assert "self.schedule_stream.wait_event(ev)" in war and "shared_read_done_event" in war
    ends = ast.unparse(
        src.method(
            "sglang/srt/layers/attention/base_attn_backend.py",
            "AttentionBackend",
            "shared_read_ends",
        )
    )
    assert (
        "if fm.is_decode() or fm.is_target_verify():\n        return SharedReadEnds.IN_REPLAY"
        in ends
    )


def test_a_registered_loader_replaces_sglangs_default_load(src: Source) -> None:
    """`update_weights_from_tensor(load_format=LOADER)` calls `LOADER(model, named_tensors)` once
    the engine lists it in `custom_weight_loader`, imported by its dotted path; the default it
    replaces is `model.load_weights(named_tensors)`, which the loader then calls."""
    upd = ast.unparse(
        src.method(
            "sglang/srt/model_executor/model_runner_components/weight_updater.py",
            "WeightUpdater",
            "update_weights_from_tensor",
        )
    )
    assert (
        "elif load_format in self.custom_weight_loaders:\n"
        "        custom_loader = dynamic_import(load_format)\n"
        "        custom_loader(self.get_model(), named_tensors)\n"
        "    elif load_format is None:\n"
        "        self.get_model().load_weights(named_tensors)"
    ) in upd
    runner = src.text("sglang/srt/model_executor/model_runner.py")
    assert "custom_weight_loaders=get_model().custom_weight_loader," in runner
    imp = next(
        n
        for n in src.tree("sglang/srt/utils/common.py").body
        if isinstance(n, ast.FunctionDef) and n.name == "dynamic_import"
    )
    assert "importlib.import_module(module_path)" in ast.unparse(imp)
    assert sglang_weights.LOADER.rpartition(".")[2] == sglang_weights.load_after_inflight.__name__


def test_the_nccl_and_cuda_env_sglang_sets_is_what_the_adapter_restores(src: Source) -> None:
    """Every NCCL_* / CUDA_* variable `_set_envs_and_config` writes into the calling process
    (entrypoints/engine.py:1878-1921) is one `SglangEngine.from_pretrained` puts back after."""
    fn = next(
        n
        for n in src.tree(ENGINE).body
        if isinstance(n, ast.FunctionDef) and n.name == "_set_envs_and_config"
    )
    written = set()
    for n in ast.walk(fn):
        if isinstance(n, ast.Subscript) and isinstance(n.ctx, ast.Store):
            if ast.unparse(n.value) == "os.environ" and isinstance(n.slice, ast.Constant):
                written.add(n.slice.value)
        if isinstance(n, ast.Call) and ast.unparse(n.func) == "os.environ.setdefault":
            written.add(n.args[0].value)  # type: ignore[attr-defined]
    ours = {k for k in written if k.startswith(("NCCL_", "CUDA_"))}
    assert {"NCCL_CUMEM_ENABLE", "NCCL_NVLS_ENABLE", "CUDA_DEVICE_MAX_CONNECTIONS"} <= ours
    assert ours <= set(adapter.SGLANG_PROCESS_ENV), ours - set(adapter.SGLANG_PROCESS_ENV)


def _served_classes(src: Source) -> dict[str, tuple[list[str], bool]]:
    out: dict[str, tuple[list[str], bool]] = {}
    for path in sorted(
        n for n in src.names if n.startswith("sglang/srt/models/") and n.endswith(".py")
    ):
        for node in src.tree(path).body:
            if isinstance(node, ast.ClassDef):
                has = any(
                    isinstance(x, ast.FunctionDef) and x.name == "get_weights_by_name"
                    for x in node.body
                )
                bases = [ast.unparse(b).split(".")[-1] for b in node.bases]
                old = out.get(node.name, ([], False))
                out[node.name] = (old[0] + bases, old[1] or has)
    return out


@pytest.mark.slow
def test_whole_weights_by_name_is_what_sglang_has(src: Source) -> None:
    classes = _served_classes(src)

    def has(name: str, seen: frozenset = frozenset()) -> bool:
        bases, own = classes.get(name, ([], False))
        return own or any(has(b, seen | {name}) for b in bases if b not in seen)

    for arch in (
        "Qwen2ForCausalLM",
        "Qwen3ForCausalLM",
        "Qwen3MoeForCausalLM",
        "Glm4ForCausalLM",
        "Qwen3_5MoeForConditionalGeneration",
    ):
        assert arch in classes and not has(arch), arch
    assert all(has(arch) for arch in adapter.WHOLE_WEIGHTS_BY_NAME)
    exporter = ast.unparse(
        src.method(
            "sglang/srt/model_executor/model_runner_components/weight_exporter.py",
            "WeightExporter",
            "get_weights_by_name",
        )
    )
    assert "return None" in exporter  # a class without it answers None, it does not raise
    llama = ast.unparse(
        src.method("sglang/srt/models/llama.py", "LlamaForCausalLM", "get_weights_by_name")
    )
    assert (
        "// tp_size" in llama and "all_gather" in llama and "o_proj" in llama
    )  # only o/down are gathered
