"""What every engine's metrics table shares: a Prometheus metric family as autotune reads it
from an engine's /metrics, and the table of them by family name. Each engine gives its data:
its families with their kinds, help texts and extra labels (vLLM adds the releases that expose
each)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, TypeVar

MetricKind = Literal["counter", "gauge", "histogram"]


@dataclass(frozen=True)
class MetricSpec:
    """One metric family. `name` is the family as prometheus_client's text parser reports it
    (counter families lose `_total`); `sample` is the exposed sample name (histograms add
    _bucket/_sum/_count)."""

    name: str
    kind: MetricKind
    doc: str
    labels: tuple[str, ...] = ()  # beyond the engine's base labels (model_name, ...)

    @property
    def sample(self) -> str:
        return self.name + "_total" if self.kind == "counter" else self.name


Spec = TypeVar("Spec", bound=MetricSpec)


def by_name(*specs: Spec) -> dict[str, Spec]:
    """An engine's metrics table: its specs by family name."""
    return {spec.name: spec for spec in specs}
