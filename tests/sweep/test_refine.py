from __future__ import annotations

from autotune.space import builtin_space
from autotune.sweep.refine import branch_params, marginal_gain, neighbours, next_neighbour, starts


def _space():  # type: ignore[no-untyped-def]
    return builtin_space("sglang").with_overrides(
        {
            "mem_fraction_static": {"low": 0.86, "high": 0.94, "step": 0.02},
            "max_mamba_cache_size": {"choices": [None, 6, 12]},
            "speculative_algorithm": {"choices": [None, "NGRAM"]},
            "enable_hierarchical_cache": False,
            "hicache_size": None,
            "cuda_graph_max_bs_decode": None,
        }
    )


def test_neighbours_change_one_parameter_by_one_step() -> None:
    space = _space()
    base = space.resolve({"mem_fraction_static": 0.9, "max_mamba_cache_size": 6})
    moves = list(neighbours(space, base))
    mfs = sorted(m["mem_fraction_static"] for m in moves if m["mem_fraction_static"] != 0.9)
    assert mfs == [0.88, 0.92]  # ordered parameter: next value down and up
    mamba = {m["max_mamba_cache_size"] for m in moves if m["max_mamba_cache_size"] != 6}
    assert mamba == {None, 12}  # categorical: every other choice
    for m in moves:  # switching speculation on activates its children at "engine decides"
        if m["speculative_algorithm"] == "NGRAM":
            assert m["speculative_num_steps"] is None
        changed = [k for k in space.parameters if m.get(k) != base.get(k)]
        assert len(changed) == 1


def test_starts_include_the_best_of_each_branch() -> None:
    space = _space()
    assert "speculative_algorithm" in branch_params(space)
    a = space.resolve({"speculative_algorithm": None, "mem_fraction_static": 0.9})
    b = space.resolve({"speculative_algorithm": "NGRAM", "speculative_num_steps": 3})
    c = space.resolve({"speculative_algorithm": "NGRAM", "speculative_num_steps": 4})
    results = [(100.0, 1, a), (90.0, 2, b), (95.0, 3, c)]
    assert [n for n, _ in starts(space, results, maximize=True)] == [1, 3]
    assert [n for n, _ in starts(space, results, maximize=False)] == [2, 1]


def test_next_neighbour_prefers_moves_the_data_favours() -> None:
    space = _space()
    base = space.resolve({"mem_fraction_static": 0.9, "max_mamba_cache_size": 6})
    # trials with 12 mamba slots did better than with 6: that move is tried first
    results = [
        (50.0, 1, space.resolve({"max_mamba_cache_size": 6})),
        (90.0, 2, space.resolve({"max_mamba_cache_size": 12, "mem_fraction_static": 0.86})),
    ]
    score = marginal_gain(results, maximize=True)
    cand = next_neighbour(
        space, base, seed=0, tried=lambda c: False, feasible=lambda c: True, score=score
    )
    assert cand is not None and cand["max_mamba_cache_size"] == 12
    none = next_neighbour(space, base, seed=0, tried=lambda c: True, feasible=lambda c: True)
    assert none is None  # every neighbour tried: a local optimum
