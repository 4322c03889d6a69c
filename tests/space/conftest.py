from __future__ import annotations

import pytest

from autotune.space import SearchSpace, builtin_space


@pytest.fixture(scope="session")
def sglang_space() -> SearchSpace:
    return builtin_space("sglang")
