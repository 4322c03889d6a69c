"""planner.hicache_perf against SGLang 0.5.17's own code (tests.wheels: the PyPI wheel, downloaded
once, a skip without a registry): the io defaults, the copies a host-only mamba state costs, the
per-layer load the forward waits on, and the round the load starts in."""

from __future__ import annotations

import ast
import enum
from types import SimpleNamespace
from typing import Any

from autotune.planner import hicache_perf as hp
from tests.wheels import function_def, wheel_text

V = "0.5.17"
SERVER_ARGS = "sglang/srt/server_args.py"
MAMBA_COMPONENT = "sglang/srt/mem_cache/unified_cache/components/mamba_component.py"
CONTROLLER = "sglang/srt/mem_cache/hybrid_cache/hybrid_cache_controller.py"


def _src(path: str) -> str:
    return wheel_text("sglang", V, path)


def _method(path: str, name: str, ns: dict[str, Any]) -> Any:
    """The release's function `name`, annotations and decorators dropped, compiled in ns."""
    fn = function_def(_src(path), name)
    fn.decorator_list = []
    for a in [*fn.args.args, *fn.args.kwonlyargs]:
        a.annotation = None
    fn.returns = None
    exec(compile(ast.Module(body=[fn], type_ignores=[]), path, "exec"), ns)
    return ns[name]


def _default(field: str) -> object:
    for node in ast.walk(ast.parse(_src(SERVER_ARGS))):
        if (
            isinstance(node, ast.AnnAssign)
            and isinstance(node.target, ast.Name)
            and node.target.id == field
            and node.value is not None
        ):
            return ast.literal_eval(node.value)
    raise AssertionError(f"no {field} default")


def test_io_defaults_are_kernel_and_page_first_and_kept() -> None:
    assert _default("hicache_io_backend") == hp.DEFAULT_IO_BACKEND
    assert _default("hicache_mem_layout") == hp.DEFAULT_MEM_LAYOUT
    resolve = _method(
        SERVER_ARGS, "_resolve_layout_io_compatibility", {"logger": SimpleNamespace(warning=print)}
    )
    args = SimpleNamespace(hicache_io_backend="kernel", hicache_mem_layout="page_first")
    resolve(args)
    assert (args.hicache_io_backend, args.hicache_mem_layout) == ("kernel", "page_first")


def test_load_back_threshold() -> None:
    fn = function_def(_src("sglang/srt/mem_cache/unified_radix_cache.py"), "init_hicache")
    values = [
        ast.literal_eval(n.value)
        for n in ast.walk(fn)
        if isinstance(n, ast.Assign)
        and isinstance(n.targets[0], ast.Attribute)
        and n.targets[0].attr == "load_back_threshold"
    ]
    assert values == [hp.LOAD_BACK_THRESHOLD]


class _Phase(enum.Enum):
    BACKUP_HOST = 1
    LOAD_BACK = 2
    BACKUP_STORAGE = 3
    PREFETCH = 4


def test_host_only_state_is_copied_twice() -> None:
    """MambaComponent.build_hicache_transfers run on a node whose state is on the host only,
    for a request holding its own slot (prepare_load_back gives it one)."""
    ns: dict[str, Any] = {
        "CacheTransferPhase": _Phase,
        "PoolTransfer": lambda **kw: SimpleNamespace(**kw),
        "PoolName": SimpleNamespace(MAMBA="mamba"),
        "PoolHitPolicy": SimpleNamespace(TRAILING_PAGES="trailing"),
    }
    build = _method(MAMBA_COMPONENT, "build_hicache_transfers", ns)
    ct = "mamba"
    data = SimpleNamespace(value=None, host_value=[7])
    node = SimpleNamespace(id=3, component_data={ct: data})
    slot = SimpleNamespace(unsqueeze=lambda dim: [5])
    comp = SimpleNamespace(component_type=ct)
    out = build(comp, node, _Phase.LOAD_BACK, mamba_pool_idx=slot)
    assert len(out) == hp.HOST_STATE_COPIES
    assert all(t.host_indices == [7] for t in out)
    # the state on device already: nothing to load
    data.value = [1]
    assert build(comp, node, _Phase.LOAD_BACK, mamba_pool_idx=slot) is None


def test_mamba_copy_launches_per_layer() -> None:
    fn = function_def(_src("sglang/srt/mem_cache/memory_pool_host.py"), "load_to_device_per_layer")
    page_first = fn.body[0]
    assert isinstance(page_first, ast.If) and "page_first" in ast.unparse(page_first.test)
    calls = [
        n
        for n in ast.walk(ast.Module(body=page_first.body, type_ignores=[]))
        if isinstance(n, ast.Call) and ast.unparse(n.func) == "self._copy_tensor_pf_lf"
    ]
    # the SSM state, then each conv shape: one for GDN and Mamba-2
    assert len(calls) == 2
    assert "conv=[conv_state_shape]" in _src("sglang/srt/configs/mamba_utils.py")
    assert hp.MAMBA_LAUNCHES_PER_COPY == 1 + 1


def test_forward_waits_layer_by_layer_for_every_layer() -> None:
    start = ast.unparse(function_def(_src(CONTROLLER), "start_loading"))
    assert "for i in range(self.layer_num)" in start
    assert "producer_event.complete(i)" in start
    assembler = _src("sglang/srt/mem_cache/hybrid_cache/hybrid_pool_assembler.py")
    assert "transfer_layer_num = len(full_layer_mapping | mamba_layer_mapping)" in assembler
    pool = _src("sglang/srt/mem_cache/memory_pool.py")
    for name in ("mamba2_layer_index", "_wait_for_layer"):
        assert "layer_transfer_counter.wait_until(" in ast.unparse(function_def(pool, name))


def test_load_starts_in_the_admitting_round() -> None:
    """The adder starts the load-back while admitting (init_load_back), and the function that
    builds this round's batch hands the queued copies to the load stream before returning it."""
    policy = _src("sglang/srt/managers/schedule_policy.py")
    assert "self.tree_cache.init_load_back(" in policy
    raw = function_def(_src("sglang/srt/managers/scheduler.py"), "_get_new_batch_prefill_raw")
    body = ast.unparse(raw)
    built = body.index("ScheduleBatch.init_new(")
    assert built < body.index("ready_to_load_host_cache()") < body.rindex("return (new_batch")


def test_no_buffer_donates_the_state_at_each_chunk_end() -> None:
    """MambaComponent.prepare_for_caching_req (no_buffer) for an unfinished chunked request:
    the tree gets a copy of the live state keyed at the chunk's end, so states sit at chunk
    boundaries (repeat_prefix); the match leaves the last token to compute."""
    copies: list[tuple[object, object]] = []
    pool = SimpleNamespace(
        mamba_pool=SimpleNamespace(copy_from=lambda src, dst: copies.append((src, dst))),
        translate_mamba_indices=lambda ids: ids,
    )
    comp = SimpleNamespace(
        cache=SimpleNamespace(enable_mamba_extra_buffer=False, req_to_token_pool=pool),
        int8_ckpt_pool=None,
        _alloc_mamba_slot=lambda: "slot",
    )
    prepare = _method(MAMBA_COMPONENT, "prepare_for_caching_req", {})
    req = SimpleNamespace(mamba_pool_idx=SimpleNamespace(unsqueeze=lambda dim: "live"))
    params = SimpleNamespace(mamba_value=None)
    assert prepare(comp, req, params, 16384, False) == 16384
    assert params.mamba_value == "slot" and copies == [("live", "slot")]
    limit = ast.unparse(
        function_def(_src("sglang/srt/managers/schedule_batch.py"), "_compute_max_prefix_len")
    )
    assert "max_prefix_len = input_len - 1" in limit
