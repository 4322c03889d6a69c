"""The run: work queue, resumable JSONL cache, merged atomic outputs (synthetic objective)."""

from __future__ import annotations

import json
import math
import shutil
from collections import Counter
from pathlib import Path

import pytest

from kernels_tuning import item_search, runner
from kernels_tuning import output as O
from kernels_tuning.kernel_config import SGLANG_DEFAULT_FP8, KernelConfig
from kernels_tuning.resources import H200_LIMITS
from kernels_tuning.shapes import GemmShape
from kernels_tuning.space import cdiv

SHAPES = [GemmShape(5120, 6144, ("o_proj",)), GemmShape(14336, 5120, ("qkv_proj",))]
PROV = {"gpu_name": "NVIDIA H200", "sm_count": 132, "triton": "3.6.0"}


class Res:
    def __init__(self, cost: float) -> None:
        self.cost = cost
        self.error = None


class Killed(Exception):
    pass


class Factory:
    """Synthetic cost; counts calls; can 'die' after a number of evaluations."""

    def __init__(self, die_after: int | None = None) -> None:
        self.calls: Counter[str] = Counter()
        self.die_after = die_after

    def __call__(self, item: runner.WorkItem):  # type: ignore[no-untyped-def]
        def f(c: KernelConfig) -> Res:
            if self.die_after is not None and sum(self.calls.values()) >= self.die_after:
                raise Killed
            self.calls[item.key()] += 1
            tiles = cdiv(item.m, c.BLOCK_SIZE_M) * cdiv(item.n, c.BLOCK_SIZE_N) * c.SPLIT_K
            work = math.ceil(tiles / 132) * c.BLOCK_SIZE_M * c.BLOCK_SIZE_N * item.k / c.SPLIT_K
            return Res(work * (1 + 0.2 * abs(c.num_stages - 4)) * 1e-6 + 2)

        return f


def _tune(tmp: Path, factory: Factory, ms: list[int], out: bool = True) -> runner.TuneSummary:
    items = runner.make_items("fp8", SHAPES, ms)
    return runner.tune(
        items,
        cache_path=tmp / "cache.jsonl",
        limits=H200_LIMITS,
        objective_factory=factory,
        params=runner.TuneParams(max_evals=10),
        out_dir=tmp / "out" if out else None,
        device_name="NVIDIA_H200",
        provenance=PROV,
    )


def test_tune_writes_engine_files(tmp_path: Path) -> None:
    s = _tune(tmp_path, Factory(), [1, 16, 64])
    assert len(s.results) == 6 and not s.skipped
    sg = tmp_path / "out/sglang" / O.sglang_filename(5120, 6144, "NVIDIA_H200")
    vl = tmp_path / "out/vllm" / O.vllm_filename(5120, 6144, "NVIDIA_H200")
    own = tmp_path / "out/autotune" / O.fp8_splitk_filename(5120, 6144, "NVIDIA_H200")
    for p in (sg, vl, own):
        assert p.exists() and O.provenance_path(p).exists()
    raw = json.loads(sg.read_text())
    assert list(raw) == ["1", "16", "64"]
    assert all(set(v) == set(SGLANG_DEFAULT_FP8.as_dict(engine=True)) for v in raw.values())
    assert json.loads(sg.read_text()) == json.loads(vl.read_text())
    assert any(v.get("SPLIT_K", 1) > 1 for v in json.loads(own.read_text()).values())
    prov = O.read_provenance(sg)
    assert prov is not None and prov.entries["16"]["evaluations"] > 0
    assert prov.kernel_sha256 == O.kernel_source_sha256("fp8")


def test_killed_run_resumes_without_repeating_work(tmp_path: Path) -> None:
    # The first item takes 37 evaluations (10 + 27 for split-K, SWAP_AB, FOLD_SCALES and
    # TMA): die in the second.
    dying = Factory(die_after=45)
    with pytest.raises(Killed):
        _tune(tmp_path, dying, [1, 16, 64], out=False)
    done_before = sum(
        1
        for line in (tmp_path / "cache.jsonl").read_text().splitlines()
        if json.loads(line)["t"] == "item"
    )
    assert 0 < done_before < 6
    # a torn last line (killed mid-write) is skipped
    with (tmp_path / "cache.jsonl").open("a") as f:
        f.write('{"t": "eval", "item": "fp8:N=51')
    resumed = Factory()
    s = _tune(tmp_path, resumed, [1, 16, 64])
    assert len(s.results) == 6
    fresh = Factory()
    _tune(tmp_path / "fresh", fresh, [1, 16, 64], out=False)
    # every evaluation done before the kill is reused: the two runs together do what a fresh
    # run does (same seeds, same sampler seeds)
    assert sum(dying.calls.values()) + sum(resumed.calls.values()) == sum(fresh.calls.values())
    again = Factory()
    _tune(tmp_path, again, [1, 16, 64])
    assert sum(again.calls.values()) == 0  # all done: nothing re-run


def test_a_second_run_merges_into_existing_files(tmp_path: Path) -> None:
    _tune(tmp_path, Factory(), [1, 16])
    _tune(tmp_path, Factory(), [64])  # same cache file: old items stay done
    sg = tmp_path / "out/sglang" / O.sglang_filename(14336, 5120, "NVIDIA_H200")
    assert list(json.loads(sg.read_text())) == ["1", "16", "64"]


def test_seeds_put_the_default_first_then_neighbours(tmp_path: Path) -> None:
    s = _tune(tmp_path, Factory(), [1, 64], out=False)
    item = runner.WorkItem("fp8", 5120, 6144, 16, "o_proj")
    seeds = runner.choose_seeds(item, s.results)
    assert seeds[0] == SGLANG_DEFAULT_FP8
    below = s.results["fp8:N=5120,K=6144,M=1"]
    assert below.engine_best in seeds


def test_polish_adopts_a_neighbours_better_winner(tmp_path: Path) -> None:
    s = _tune(tmp_path, Factory(), [16, 24, 32], out=False)
    cache = tmp_path / "cache.jsonl"
    # make M=24's recorded winner poor, as a search with a small budget can leave it
    bad = s.results["fp8:N=5120,K=6144,M=24"]
    poor = KernelConfig(16, 256, 64, 1, 8, 2)
    rec = bad.to_record()
    rec.update(best=poor.as_dict(), engine_best=poor.as_dict())
    with cache.open("a") as f:
        f.write(json.dumps(rec) + "\n")
    items = runner.make_items("fp8", SHAPES, [16, 24, 32])
    p = runner.polish(items, cache_path=cache, limits=H200_LIMITS, objective_factory=Factory())
    fixed = p.results["fp8:N=5120,K=6144,M=24"]
    assert fixed.best != poor and fixed.phases["polish"] >= 2
    _, done = runner.ResultCache(cache).load()
    assert done["fp8:N=5120,K=6144,M=24"].best == fixed.best


def test_polish_times_the_winners_from_before_a_retune(tmp_path: Path) -> None:
    _tune(tmp_path, Factory(), [1, 4096], out=False)
    cache = runner.ResultCache(tmp_path / "cache.jsonl")
    _, first = cache.load()
    items = runner.make_items("fp8", SHAPES[:1], [1, 4096])
    assert cache.superseded() == {}
    cache.mark_retune(items)
    prior = cache.superseded()
    assert set(prior) == {i.key() for i in items}
    assert all([r.best for r in prior[k]] == [first[k].best] for k in prior)
    _tune(tmp_path, FoldFactory(), [1, 4096], out=False)
    runner.polish(
        items, cache_path=cache.path, limits=H200_LIMITS, objective_factory=FoldFactory(),
        prior=prior,
    )  # fmt: skip
    polished = [
        json.loads(x) for x in cache.path.read_text().splitlines() if '"phase":"polish"' in x
    ]
    for key, (old,) in prior.items():
        timed = {KernelConfig.from_dict(r["cfg"]) for r in polished if r["item"] == key}
        assert old.best is not None and old.best in timed, key
        if old.best.BLOCK_SIZE_N <= 128:  # and its folded form where FOLD_SCALES applies
            assert old.best.with_(FOLD_SCALES=1) in timed, key
        assert old.best.with_(TMA=1) in timed, key  # and its TMA form
    assert cache.superseded() == prior  # polish records do not change what was set aside
    cache.mark_retune(items)  # marked again (a re-tune run again): both sets stay candidates
    twice = cache.superseded()
    assert all(len(v) == 2 and v[0].best == prior[k][0].best for k, v in twice.items())


class HiccupFactory(Factory):
    """`hit` runs at a tenth of the synthetic model's cost (the fastest of any pool), but its
    first timing per item runs 5x slow (a momentary slowdown of a shared GPU)."""

    def __init__(self, hit: KernelConfig) -> None:
        super().__init__()
        self.hit = hit
        self.seen: set[str] = set()

    def __call__(self, item: runner.WorkItem):  # type: ignore[no-untyped-def]
        f = super().__call__(item)

        def g(c: KernelConfig) -> Res:
            cost = f(c).cost
            if c != self.hit:
                return Res(cost)
            if item.key() not in self.seen:
                self.seen.add(item.key())
                return Res(cost * 5)
            return Res(cost * 0.1)

        return g


@pytest.mark.parametrize("rounds", [1, 2])
def test_polish_rounds_outlast_a_slow_first_timing(tmp_path: Path, rounds: int) -> None:
    _tune(tmp_path, Factory(), [16, 24, 32], out=False)
    _, done = runner.ResultCache(tmp_path / "cache.jsonl").load()
    hit = KernelConfig(32, 128, 128, 1, 4, 4)  # recorded as M=24's winner: in M=32's pool
    rec = done["fp8:N=5120,K=6144,M=24"].to_record()
    rec.update(best=hit.as_dict(), engine_best=hit.as_dict())
    with (tmp_path / "cache.jsonl").open("a") as f:
        f.write(json.dumps(rec) + "\n")
    items = runner.make_items("fp8", SHAPES[:1], [32])
    p = runner.polish(
        items, cache_path=tmp_path / "cache.jsonl", limits=H200_LIMITS,
        objective_factory=HiccupFactory(hit), rounds=rounds,
    )  # fmt: skip
    assert (p.results["fp8:N=5120,K=6144,M=32"].best == hit) == (rounds == 2)


def test_tune_and_polish_writes_files_and_retunes_without_losing_an_earlier_winner(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    items = runner.make_items("fp8", SHAPES[:1], [1, 16, 4096])
    kw = dict(
        cache_path=tmp_path / "cache.jsonl", limits=H200_LIMITS, out_dir=tmp_path / "out",
        params=runner.TuneParams(max_evals=10), device_name="NVIDIA_H200", provenance=PROV,
    )  # fmt: skip
    first = runner.tune_and_polish(items, objective_factory=Factory(), **kw)  # type: ignore[arg-type]
    assert set(first.results) == {i.key() for i in items}
    assert all(r.phases.get("polish") for r in first.results.values())  # cross-checked
    own = tmp_path / "out/autotune" / O.fp8_splitk_filename(5120, 6144, "NVIDIA_H200")
    assert set(json.loads(own.read_text())) == {"1", "16", "4096"}
    # Without --retune a finished item is not searched again.
    again = Factory()
    runner.tune_and_polish(items, objective_factory=again, polish_pass=False, **kw)  # type: ignore[arg-type]
    assert not again.calls
    # A re-tune whose search can no longer reach an earlier winner (the space changed): the
    # cross-check still times it, and it stays where it is still the fastest.
    key = "fp8:N=5120,K=6144,M=4096"
    old_best = first.results[key].best
    assert old_best is not None and old_best != SGLANG_DEFAULT_FP8
    real = item_search.build_space  # the search of an item builds its space there
    monkeypatch.setattr(
        item_search, "build_space", lambda *a, **k: [c for c in real(*a, **k) if c != old_best]
    )

    class Hidden(Factory):
        def __call__(self, item: runner.WorkItem):  # type: ignore[no-untyped-def]
            f = super().__call__(item)
            return lambda c: Res(f(c).cost * (0.1 if c == old_best else 1.0))

    # Control, on a copy of the cache: the re-tune's search alone does not find it.
    shutil.copy(tmp_path / "cache.jsonl", tmp_path / "copy.jsonl")
    control = runner.tune_and_polish(
        items, objective_factory=Hidden(), retune=True, polish_pass=False,
        **{**kw, "cache_path": tmp_path / "copy.jsonl", "out_dir": tmp_path / "copy"},
    )  # type: ignore[arg-type]  # fmt: skip
    assert control.results[key].best != old_best
    hidden = Hidden()
    redo = runner.tune_and_polish(items, objective_factory=hidden, retune=True, **kw)  # type: ignore[arg-type]
    assert set(hidden.calls) == {i.key() for i in items}  # all searched again
    assert redo.results[key].best == old_best
    assert json.loads(own.read_text())["4096"] == old_best.as_dict()


@pytest.mark.ray
def test_ray_executor_with_cpu_actors(tmp_path: Path) -> None:
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        items = runner.make_items("fp8", SHAPES[:1], [1, 16, 64, 256])
        s = runner.tune(
            items,
            cache_path=tmp_path / "c.jsonl",
            limits=H200_LIMITS,
            objective_factory=Factory(),
            executor="ray",
            num_workers=2,
            gpus_per_worker=0,
            params=runner.TuneParams(max_evals=8),
        )
        assert len(s.results) == 4
        lines = [json.loads(x) for x in (tmp_path / "c.jsonl").read_text().splitlines()]
        assert sum(1 for r in lines if r["t"] == "item") == 4
        assert sum(1 for r in lines if r["t"] == "eval") == s.evaluations
    finally:
        ray.shutdown()


class SwapFactory(Factory):
    """Swapped configs run twice as fast at small M (to see where they end up)."""

    def __call__(self, item: runner.WorkItem):  # type: ignore[no-untyped-def]
        f = super().__call__(item)

        def g(c: KernelConfig) -> Res:
            r = f(c)
            return Res(r.cost * (0.5 if c.SWAP_AB else 1.0))

        return g


def test_swap_ab_goes_to_our_files_only(tmp_path: Path) -> None:
    s = _tune(tmp_path, SwapFactory(), [1, 16, 64])
    for kind_m, res in s.results.items():
        assert res.engine_best is not None and res.engine_best.engine_ok, kind_m
    own = tmp_path / "out/autotune" / O.fp8_splitk_filename(5120, 6144, "NVIDIA_H200")
    table = json.loads(own.read_text())
    assert table["1"].get("SWAP_AB") == 1 and "SWAP_AB" not in table["64"]
    sg = tmp_path / "out/sglang" / O.sglang_filename(5120, 6144, "NVIDIA_H200")
    assert all("SWAP_AB" not in v for v in json.loads(sg.read_text()).values())


class FoldFactory(Factory):
    """Folded scales 10% faster, as on the H200 (reports/kernels/README.md, call 8)."""

    def __call__(self, item: runner.WorkItem):  # type: ignore[no-untyped-def]
        f = super().__call__(item)

        def g(c: KernelConfig) -> Res:
            return Res(f(c).cost * (0.9 if c.FOLD_SCALES else 1.0))

        return g


def test_fold_scales_goes_to_our_files_only(tmp_path: Path) -> None:
    s = _tune(tmp_path, FoldFactory(), [1, 4096])
    for key, res in s.results.items():
        assert res.engine_best is not None and res.engine_best.engine_ok, key
        assert res.best is not None and res.best.FOLD_SCALES == 1, key
        assert res.best_us < res.engine_best_us, key
    own = tmp_path / "out/autotune" / O.fp8_splitk_filename(5120, 6144, "NVIDIA_H200")
    assert all(v.get("FOLD_SCALES") == 1 for v in json.loads(own.read_text()).values())
    for name in (O.sglang_filename(5120, 6144, "NVIDIA_H200"),):
        table = json.loads((tmp_path / "out/sglang" / name).read_text())
        assert all("FOLD_SCALES" not in v for v in table.values())


def test_retune_marker_searches_selected_items_again(tmp_path: Path) -> None:
    _tune(tmp_path, Factory(), [1, 16, 64], out=False)
    cache = runner.ResultCache(tmp_path / "cache.jsonl")
    small = runner.make_items("fp8", SHAPES[:1], [1, 16])
    assert cache.mark_retune(small) == 2
    evals, done = cache.load()
    assert set(done) == {i.key() for i in runner.make_items("fp8", SHAPES, [1, 16, 64])} - {
        i.key() for i in small
    }
    assert not any(k in evals for k in (i.key() for i in small))
    again = SwapFactory()
    s = _tune(tmp_path, again, [1, 16, 64])
    assert set(again.calls) == {i.key() for i in small}  # only the marked items re-run
    assert len(s.results) == 6
    assert s.results[small[0].key()].best is not None
    assert s.results[small[0].key()].best.SWAP_AB == 1  # type: ignore[union-attr]


class DefaultWinsFactory(Factory):
    """The engine default (G32) fastest of the engine configs, TMA and folding 20% faster on
    top: the H200's large-M picture (reports/kernels/README.md, calls 19-23)."""

    def __call__(self, item: runner.WorkItem):  # type: ignore[no-untyped-def]
        f = super().__call__(item)

        def g(c: KernelConfig) -> Res:
            base = SGLANG_DEFAULT_FP8.with_(FOLD_SCALES=c.FOLD_SCALES, TMA=c.TMA)
            cost = f(c).cost * (1.0 if c.with_(GROUP_SIZE_M=32) == base else 100.0)
            return Res(cost * (0.9 if c.TMA else 1.0) * (0.9 if c.FOLD_SCALES else 1.0))

        return g


def test_own_file_refinement_starts_from_the_default_s_group_in_the_space() -> None:
    # M=1024: 16 M tiles of 64, so the default's G32 orders programs like G16 and `waste`
    # keeps only G16; the refinement must still reach the default's folded TMA form.
    item = runner.make_items("fp8", [GemmShape(5120, 17408, ("down_proj",))], [1024])[0]
    f = DefaultWinsFactory()(item)
    params = runner.TuneParams(max_evals=10)
    res = runner.tune_item(item, f, H200_LIMITS, params=params, seeds=[SGLANG_DEFAULT_FP8])
    assert res.engine_best == SGLANG_DEFAULT_FP8
    assert res.best == SGLANG_DEFAULT_FP8.with_(GROUP_SIZE_M=16, FOLD_SCALES=1, TMA=1)


class AtomicFactory(Factory):
    """The atomic split-K sum 20% faster (INT4 at decode sizes on the H200: call 25)."""

    def __call__(self, item: runner.WorkItem):  # type: ignore[no-untyped-def]
        f = super().__call__(item)

        def g(c: KernelConfig) -> Res:
            return Res(f(c).cost * (0.8 if c.ATOMIC_REDUCE else 1.0))

        return g


def _tune_int4(tmp: Path, deterministic: bool, retune: bool = False) -> runner.TuneSummary:
    return runner.tune_and_polish(
        runner.make_items("int4", SHAPES[:1], [1, 4]),
        cache_path=tmp / "cache.jsonl",
        limits=H200_LIMITS,
        out_dir=tmp / "out",
        retune=retune,
        objective_factory=AtomicFactory(),
        params=runner.TuneParams(max_evals=24, deterministic=deterministic),
        device_name="NVIDIA_H200",
        provenance=PROV,
    )


def test_int4_atomic_reduce_is_searched_unless_deterministic(tmp_path: Path) -> None:
    s = _tune_int4(tmp_path / "a", deterministic=False)
    assert all(r.best is not None and r.best.ATOMIC_REDUCE for r in s.results.values())
    f = tmp_path / "a/out/autotune" / O.int4_filename(5120, 6144, "NVIDIA_H200", 128, "awq")
    assert all(v.get("ATOMIC_REDUCE") == 1 for v in json.loads(f.read_text()).values())
    # a deterministic re-tune never times an atomic config, not even the earlier winners'
    # ATOMIC_REDUCE forms the cross-check otherwise adds
    shutil.copytree(tmp_path / "a", tmp_path / "d")
    n_before = len((tmp_path / "d/cache.jsonl").read_text().splitlines())
    d = _tune_int4(tmp_path / "d", deterministic=True, retune=True)
    new = (tmp_path / "d/cache.jsonl").read_text().splitlines()[n_before:]
    cfgs = [json.loads(x)["cfg"] for x in new if '"cfg"' in x]
    assert cfgs and not any(c.get("ATOMIC_REDUCE") for c in cfgs)
    assert all(r.best is not None and not r.best.ATOMIC_REDUCE for r in d.results.values())
    # a deterministic run that only resumes times the ordered forms of the atomic winners (the
    # cross-check) and ships the fastest, with its own time
    shutil.copytree(tmp_path / "a", tmp_path / "r")
    r = _tune_int4(tmp_path / "r", deterministic=True)
    cost = AtomicFactory()
    for key, res in r.results.items():
        assert res.best is not None and not res.best.ATOMIC_REDUCE, key
        assert math.isclose(res.best_us, cost(res.item)(res.best).cost, rel_tol=1e-4), key
    f = tmp_path / "r/out/autotune" / O.int4_filename(5120, 6144, "NVIDIA_H200", 128, "awq")
    assert not any("ATOMIC_REDUCE" in v for v in json.loads(f.read_text()).values())
    # without the cross-check: the ordered form of each atomic winner, its time unknown
    shutil.copytree(tmp_path / "a", tmp_path / "n")
    n = runner.tune_and_polish(
        runner.make_items("int4", SHAPES[:1], [1, 4]), cache_path=tmp_path / "n/cache.jsonl",
        limits=H200_LIMITS, out_dir=tmp_path / "n/out", polish_pass=False,
        objective_factory=AtomicFactory(), params=runner.TuneParams(deterministic=True),
        device_name="NVIDIA_H200", provenance=PROV,
    )  # fmt: skip
    for key, res in n.results.items():
        won = s.results[key].best
        assert won is not None and res.best == won.with_(ATOMIC_REDUCE=0), key
        assert res.best_us == math.inf, key
    side = json.loads(O.provenance_path(tmp_path / "n/out/autotune" / f.name).read_text())
    assert all(e["us"] is None for e in side["entries"].values())


def test_polish_times_the_atomic_forms_of_earlier_int4_winners(tmp_path: Path) -> None:
    items = runner.make_items("int4", SHAPES[:1], [1])
    cache_path = tmp_path / "cache.jsonl"
    runner.tune(
        items, cache_path=cache_path, limits=H200_LIMITS, objective_factory=Factory(),
        params=runner.TuneParams(max_evals=12, deterministic=True),
    )  # fmt: skip
    cache = runner.ResultCache(cache_path)
    _, first = cache.load()
    old = first[items[0].key()].best
    assert old is not None and old.SPLIT_K > 1 and not old.ATOMIC_REDUCE
    cache.mark_retune(items)
    runner.tune(
        items, cache_path=cache_path, limits=H200_LIMITS, objective_factory=Factory(),
        params=runner.TuneParams(max_evals=12, deterministic=True),
    )  # fmt: skip
    runner.polish(
        items, cache_path=cache_path, limits=H200_LIMITS, objective_factory=AtomicFactory(),
        prior=cache.superseded(),
    )  # fmt: skip
    _, done = cache.load()
    best = done[items[0].key()].best
    assert best is not None and best.ATOMIC_REDUCE and best.with_(ATOMIC_REDUCE=0) == old
