"""The vLLM config fields autotune handles specially: data only, in emission order.

`FIELDS` holds renames across releases (`--cuda-graph-sizes` up to 0.12.0,
`--cudagraph-capture-sizes` / `--max-cudagraph-capture-size` from 0.11.1), aliases (`tp_size`),
value checks argparse does not do, and env-only fields. The search space's speculative fields
(`speculative_method`, `num_speculative_tokens`, `prompt_lookup_max`, `prompt_lookup_min`,
`speculative_model`; autotune/data/search_spaces/vllm.yaml) are pseudo fields: they fold into
one `--speculative-config` JSON element (autotune.engines.vllm.speculative).

Any other config field follows the mechanical rule `field_name -> --field-name` and is accepted
where the catalog (autotune.engines.vllm.releases) has that flag. `TABLE` joins the two.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from autotune.engines._flags import FlagTable
from autotune.engines.vllm.releases import FlagSpec, flag_catalog, release_name

ValueType = Literal["int", "float", "fraction", "str", "bool", "int_list", "str_or_list", "json"]


@dataclass(frozen=True)
class Field:
    """A config field: its flag per release range and the checks argparse lacks.

    flags: (first, last, flag) per range of releases; empty = `--field-name` wherever the
        catalogue has it.
    aliases: other config names for the same field.
    type: the value check (None: from the catalogue's kind).
    env: the field sets this environment variable instead of a flag (from release env_since).
    pseudo: folded into --speculative-config (the search space's speculative fields).
    """

    flags: tuple[tuple[str, str, str], ...] = ()
    aliases: tuple[str, ...] = ()
    type: ValueType | None = None
    minimum: float | None = None
    env: str | None = None
    env_since: str = "0.10.0"
    pseudo: bool = False


FIRST, LAST = "0.10.0", "0.34.0"
# `--cuda-graph-sizes` (0.10.0 .. 0.12.0, deprecated from 0.11.1): a list, or one value meaning
# "capture 1, 2, 4 and multiples of 8 up to N" (vllm/config SchedulerConfig.cuda_graph_sizes).
_OLD_GRAPH = ("0.10.0", "0.11.0", "--cuda-graph-sizes")
# The first release with --cudagraph-capture-sizes / --max-cudagraph-capture-size.
GRAPH_RENAME = "0.11.1"

FIELDS: dict[str, Field] = {
    # memory and capacity
    "max_model_len": Field(type="int", minimum=1),
    "gpu_memory_utilization": Field(type="fraction"),
    "kv_cache_dtype": Field(type="str"),
    "block_size": Field(type="int", minimum=1),
    "max_num_seqs": Field(type="int", minimum=1),
    "max_num_batched_tokens": Field(type="int", minimum=1),
    "enable_chunked_prefill": Field(type="bool"),
    "enable_prefix_caching": Field(type="bool"),
    "quantization": Field(type="str"),
    "tensor_parallel_size": Field(type="int", minimum=1, aliases=("tp_size", "tp")),
    # speculative decoding (pseudo fields -> --speculative-config JSON)
    "speculative_config": Field(type="json"),
    "speculative_method": Field(type="str", pseudo=True),
    "num_speculative_tokens": Field(type="int", minimum=1, pseudo=True),
    "speculative_model": Field(type="str", pseudo=True),
    "prompt_lookup_max": Field(type="int", minimum=1, pseudo=True),
    "prompt_lookup_min": Field(type="int", minimum=1, pseudo=True),
    # CUDA graphs
    "enforce_eager": Field(type="bool"),
    "cudagraph_capture_sizes": Field(
        flags=(_OLD_GRAPH, (GRAPH_RENAME, LAST, "--cudagraph-capture-sizes")), type="int_list"
    ),
    "max_cudagraph_capture_size": Field(
        flags=(_OLD_GRAPH, (GRAPH_RENAME, LAST, "--max-cudagraph-capture-size")),
        type="int",
        minimum=1,
    ),
    "compilation_config": Field(type="json"),
    # vLLM >= 0.18 subtracts the profiled CUDA graph memory from the KV cache when this is on
    # (the default from 0.20.0; gpu_worker.determine_available_memory).
    "memory_profiler_estimate_cudagraphs": Field(
        type="bool", env="VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS", env_since="0.18.0"
    ),
    # serving
    "served_model_name": Field(type="str_or_list"),
    "reasoning_parser": Field(type="str"),
    "tool_call_parser": Field(type="str"),
    "enable_auto_tool_choice": Field(type="bool"),
    "trust_remote_code": Field(type="bool"),
}

SPECULATIVE_FIELDS = (
    "speculative_method",
    "speculative_model",
    "num_speculative_tokens",
    "prompt_lookup_max",
    "prompt_lookup_min",
)
# The JSON keys of SpeculativeConfig each pseudo field sets.
SPECULATIVE_KEYS = {
    "speculative_method": "method",
    "speculative_model": "model",
    "num_speculative_tokens": "num_speculative_tokens",
    "prompt_lookup_max": "prompt_lookup_max",
    "prompt_lookup_min": "prompt_lookup_min",
}
NGRAM_METHODS = ("ngram", "ngram_gpu")

ALIASES: dict[str, str] = {a: name for name, f in FIELDS.items() for a in f.aliases}

# Set through build_command's own arguments, never through the config.
RESERVED: dict[str, str] = {"model": "model", "model_tag": "model", "host": "host", "port": "port"}

TABLE: FlagTable[FlagSpec] = FlagTable(
    engine="vLLM",
    releases="releases",
    release_name=release_name,
    load=flag_catalog,
    fields=FIELDS,
    aliases=ALIASES,
    reserved=RESERVED,
    what="vLLM config field",
    negated_names=False,
)


def field_of(name: str) -> Field:
    """The table's entry for a canonical field name (a plain Field for catalog-only fields)."""
    return FIELDS.get(name, Field())
