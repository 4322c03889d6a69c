"""autotune.engines.builds: nightlies, release candidates, vendor and uncatalogued patch builds
follow one catalogued release, the same one for flags, planner and search-space rules; builds of a
newer line are refused with the release to give instead."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from autotune.engines import get_adapter
from autotune.errors import ConfigError
from autotune.planner.dispatch import followed

CASES = [
    # setuptools_scm versions of vLLM's nightly wheels and source builds (public logs:
    # tests/data/real_launches), a vendor build, release candidates and a patch release
    ("vllm", "0.34.1.dev5+g0123abc", "0.34.0", "development build"),
    ("vllm", "0.19.2rc1.dev134+gfe9c3d6c5", "0.19.1", "development build"),
    ("vllm", "0.20.2rc1.dev9+g01d4d1ad3", "0.20.2", "development build"),
    ("vllm", "0.34.0rc1", "0.34.0", "pre-release"),
    ("vllm", "0.34.1", "0.34.0", "uncatalogued release"),
    ("vllm", "0.11.0+582e4e37.nv25.11", "0.11.0", "release"),
    ("vllm", "0.10.1.1", "0.10.1.1", "release"),
    ("vllm", "v0.33.0", "0.33.0", "release"),
    ("sglang", "0.5.10rc0", "0.5.10", "pre-release"),
    ("sglang", "0.5.23.post1.dev3+g0123abc", "0.5.23", "development build"),
    ("sglang", "0.5.15.post1", "0.5.15", "release"),
    ("sglang", "0.5.17+cu128", "0.5.17", "release"),
    ("llamacpp", "0.3.36", "0.3.36", "release"),
]


@pytest.mark.parametrize(("engine", "build", "release", "kind"), CASES)
def test_each_build_follows_one_catalogued_release(
    engine: str, build: str, release: str, kind: str
) -> None:
    f = followed(engine, build)
    assert (f.release, f.kind) == (release, kind)
    assert (f.note() is None) == (kind == "release")


def test_notes_say_which_release_and_why() -> None:
    rc = followed("sglang", "0.5.10rc0").note() or ""
    assert "0.5.10's flags" in rc and "the release it leads to" in rc
    nightly = followed("vllm", "0.34.1.dev5+g0123abc").note() or ""
    assert "development build" in nightly and "0.34.0's flags" in nightly
    assert "the newest catalogued release before it" in nightly


@pytest.mark.parametrize(
    ("engine", "build", "hint"),
    [
        ("vllm", "0.35.0rc1.dev2+g0123abc", "use 0.34.0 to follow"),
        ("vllm", "0.35.0", "use 0.34.0 to follow"),
        ("vllm", "0.9.2", None),  # planned (planner.vllm_history), never launched
        ("sglang", "0.5.24rc0", "use 0.5.23 to follow"),
        ("sglang", "0.5.8", None),
        ("sglang", "0.5.17.1", None),  # no SGLang release has four numbers
        ("sglang", "0.6", None),
        ("vllm", "latest", None),
    ],
)
def test_builds_beyond_the_catalogue_are_refused(
    engine: str, build: str, hint: str | None
) -> None:
    with pytest.raises(ConfigError) as err:
        followed(engine, build)
    text = str(err.value)
    assert text.startswith("--engine-version: unsupported") and repr(build) in text
    assert (hint is not None) == ("follow the newest catalogued release" in text)
    if hint:
        assert hint in text


def test_vllm_planner_plans_a_build_as_the_flags_follow_it() -> None:
    from autotune.planner.vllm_history import planner_version

    for engine, build, release, _ in CASES:
        if engine == "vllm":
            assert planner_version(build) == release


@pytest.mark.parametrize(
    ("engine", "build", "release"),
    [("vllm", "0.34.1.dev5+g0123abc", "0.34.0"), ("sglang", "0.5.12rc0", "0.5.12")],
)
def test_a_build_launches_with_its_release_argv(engine: str, build: str, release: str) -> None:
    cfg = {"max_num_seqs": 64} if engine == "vllm" else {"max_running_requests": 64}
    adapter = get_adapter(engine)
    argv = adapter.build_command(cfg, model="org/m", version=build).argv
    assert argv == adapter.build_command(cfg, model="org/m", version=release).argv


def test_space_rules_meet_the_followed_release() -> None:
    """SGLang 0.5.12rc0 precedes 0.5.12 in PEP 440, but its flags are 0.5.12's: the rules
    (`engine.version: {gte: "0.5.12"}`) must see 0.5.12 too, or a flag is allowed by one and
    refused by the other."""
    from autotune.hardware import get_gpu
    from autotune.models import load_card
    from autotune.planner.dispatch import target_facts

    card, gpu = load_card("qwen3.8-27b-fp8"), get_gpu("h200-141g")
    context, _ = target_facts("sglang", card, gpu, "0.5.12rc0")
    assert context.engine_version == "0.5.12"
    context, _ = target_facts("vllm", card, gpu, "0.34.1.dev5+g0123abc")
    assert context.engine_version == "0.34.0"


def test_plan_of_a_nightly_says_what_it_follows() -> None:
    from autotune.cli import app

    args = ["plan", "--engine", "vllm", "--model", "qwen3.8-27b-fp8", "--gpu", "h200-141g"]
    nightly = CliRunner().invoke(app, [*args, "--engine-version", "0.34.1.dev5+g0123abc"])
    assert nightly.exit_code == 0, nightly.output
    assert "note: vLLM 0.34.1.dev5+g0123abc is a development build" in nightly.output
    as_json = CliRunner().invoke(
        app, [*args, "--engine-version", "0.34.1.dev5+g0123abc", "--json"]
    )
    release = CliRunner().invoke(app, [*args, "--engine-version", "0.34.0", "--json"])
    a, b = json.loads(as_json.output), json.loads(release.output)
    assert a["assumptions"][0].startswith("vLLM 0.34.1.dev5+g0123abc is a development build")
    assert a["assumptions"][1:] == b["assumptions"] and a["kv_pool_tokens"] == b["kv_pool_tokens"]
    newer = CliRunner().invoke(app, [*args, "--engine-version", "0.35.0"])
    assert newer.exit_code != 0 and "use 0.34.0 to follow the newest" in str(newer.exception)


def test_sglang_plans_a_release_candidate_as_its_release() -> None:
    from autotune.planner.dispatch import plan_target

    args = ("sglang", "qwen3.8-27b-fp8", "h100-80g", {"max_running_requests": 16})
    rc, release = plan_target(*args, version="0.5.12rc0"), plan_target(*args, version="0.5.12")
    assert rc.engine_version == release.engine_version == "0.5.12"
    assert rc.kv_pool_tokens == release.kv_pool_tokens
    assert rc.assumptions == [followed("sglang", "0.5.12rc0").note(), *release.assumptions]
    post = plan_target(*args, version="0.5.15.post1")  # a release keeps its own name
    assert post.engine_version == "0.5.15.post1"


def test_a_post_release_build_and_odd_input() -> None:
    from autotune.engines.sglang.flags import parse_version as sglang_version
    from autotune.engines.vllm.releases import parse_version as vllm_version

    note = followed("vllm", "0.34.0.post1.dev3").note() or ""
    assert "0.34.0's flags" in note and "the release it builds on" in note
    for parse in (sglang_version, vllm_version):
        with pytest.raises(ConfigError, match="--engine-version"):
            parse([1])  # type: ignore[arg-type]
