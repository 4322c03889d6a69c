from __future__ import annotations

from autotune.space import builtin_space
from autotune.sweep.refine import (
    branch_jumps,
    branch_params,
    marginal_gain,
    neighbours,
    next_neighbour,
    starts,
)


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


def test_a_move_into_values_that_broke_a_bound_comes_after_unmeasured_ones() -> None:
    """A broken run (it met no bound) counts at the worst feasible result: the move toward
    its value ranks below moves toward values never measured (mixed-ttft-a100: every start
    stepped into the same too-small chunk in turn)."""
    space = _space()
    base = space.resolve({"mem_fraction_static": 0.9, "max_mamba_cache_size": 6})
    worse = space.resolve({"mem_fraction_static": 0.94, "max_mamba_cache_size": 6})
    results = [(80.0, 1, base), (60.0, 2, worse)]
    broken = [space.resolve({"max_mamba_cache_size": 12, "mem_fraction_static": 0.9})] * 3
    plain = marginal_gain(results, maximize=True)
    aware = marginal_gain(results, maximize=True, broken=broken)
    to12 = {**base, "max_mamba_cache_size": 12}
    to_none = {**base, "max_mamba_cache_size": None}
    assert plain(base, to12) == plain(base, to_none)  # neither value has a feasible result
    assert aware(base, to12) < aware(base, to_none)
    # minimising: a broken run counts at the largest (worst) value
    assert marginal_gain(results, maximize=False, broken=broken)(base, to12) < 0


def test_a_branch_value_without_a_feasible_result_is_tried_at_the_incumbent() -> None:
    space = _space()
    best = space.resolve({"speculative_algorithm": "NGRAM", "mem_fraction_static": 0.92})
    results = [(100.0, 1, best)]
    jumps = list(branch_jumps(space, best, results))
    assert any(j["speculative_algorithm"] is None for j in jumps)
    assert all(j["mem_fraction_static"] == 0.92 for j in jumps)  # the incumbent's settings
    for j in jumps:  # each jump moves one branch root to a value no feasible result holds
        moved = [k for k in branch_params(space) if j.get(k) != best.get(k)]
        assert len(moved) == 1
    # once the branch holds a feasible result, its own start climbs it instead
    other = space.resolve({"speculative_algorithm": None, "mem_fraction_static": 0.86})
    later = list(branch_jumps(space, best, [*results, (50.0, 2, other)]))
    assert all(j["speculative_algorithm"] == "NGRAM" for j in later)
