"""Seeded synthetic prompts: deterministic, distinct, about the asked length."""

from __future__ import annotations

import pytest

from autotune.bench.prompts import TEXT_KINDS, estimate_tokens, make_text


@pytest.mark.parametrize("kind", TEXT_KINDS)
@pytest.mark.parametrize("target", [64, 1000, 16384])
def test_length_is_close_to_target(kind: str, target: int) -> None:
    text = make_text(kind, target, "0:i1")  # type: ignore[arg-type]
    assert abs(estimate_tokens(text) - target) <= max(8, target // 50)


@pytest.mark.parametrize("kind", TEXT_KINDS)
def test_seeded_and_distinct(kind: str) -> None:
    a = make_text(kind, 200, "7:r0:i0")  # type: ignore[arg-type]
    assert a == make_text(kind, 200, "7:r0:i0")  # type: ignore[arg-type]
    b = make_text(kind, 200, "7:r0:i1")  # type: ignore[arg-type]
    assert a != b
    # Different requests share no prefix beyond a few characters (no accidental cache hits).
    common = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), 0)
    assert common < 20


def test_kinds_look_like_their_kind() -> None:
    code = make_text("code", 300, "k")
    assert "def " in code and "=" in code
    assert code.count("\n") > 10
    extraction = make_text("extraction", 300, "k")
    assert extraction.rstrip().endswith("write nothing else.")
    assert "Repeat the passage above" in extraction
    prose = make_text("prose", 300, "k")
    assert prose.count(".") >= 300 // 17 and "def " not in prose


def test_estimate_tokens() -> None:
    assert estimate_tokens("The cat sat.") == 4
    assert estimate_tokens("a\n\nb") == 3
    assert estimate_tokens("x = f(y)") == 6


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match=">= 1"):
        make_text("prose", 0, "k")
    with pytest.raises(ValueError, match="unknown text kind"):
        make_text("poetry", 10, "k")  # type: ignore[arg-type]
