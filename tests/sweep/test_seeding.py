from __future__ import annotations

import yaml

from autotune.cli.demo import DEMO_SPEC
from autotune.hardware import get_gpu
from autotune.models import load_card
from autotune.sweep.planning import TrialPlanner
from autotune.sweep.seeding import seed_configs
from autotune.sweep.setup import build_space
from autotune.sweep.spec import parse_spec


def _seeds(overrides: dict[str, object] | None = None) -> list:  # type: ignore[type-arg]
    data = yaml.safe_load(DEMO_SPEC)
    data["space"]["overrides"].update(overrides or {})
    spec = parse_spec(data)
    space = build_space(spec)
    card, gpu = load_card(spec.target.model), get_gpu(spec.target.gpu)
    planner = TrialPlanner(card=card, gpu=gpu, space=space, version="0.5.17", host_free_gib=64)
    return seed_configs(spec, space, planner, card, gpu)


def test_baseline_first_then_k1_completed_by_rule_p2() -> None:
    seeds = _seeds()
    assert [s.id for s in seeds] == ["baseline", "known_good:K1"]
    base, k1 = seeds
    assert base.enqueued and base.config["mem_fraction_static"] is None  # engine decides
    assert k1.enqueued, k1.reason
    # K1 names no io backend; P2 (hybrid + HiCache) requires direct, so the seed is completed
    assert k1.config["hicache_io_backend"] == "direct" and "P2" in k1.source
    assert k1.config["mem_fraction_static"] == 0.92 and k1.config["max_mamba_cache_size"] == 6


def test_k1_outside_the_space_is_skipped_with_a_reason() -> None:
    seeds = _seeds({"max_mamba_cache_size": {"choices": [None, 12, 24]}})
    k1 = next(s for s in seeds if s.id == "known_good:K1")
    assert not k1.enqueued and "max_mamba_cache_size" in (k1.reason or "")
    seeds = _seeds({"enable_hierarchical_cache": False})
    k1 = next(s for s in seeds if s.id == "known_good:K1")
    assert not k1.enqueued and "fixed to False" in (k1.reason or "")
