"""Triton GEMM kernel tuning: FP8 W8A8 block-wise and INT4 W4A16, configs in the files the
engines load (reference/kernel-tuning-anchors.md; report: reports/kernels/README.md).

Modules (heavy imports stay inside functions; torch and triton only where kernels run):

- `kernels/`    our Triton kernels (fp8_block, int4_w4a16), their references and quantizers, and
                the vLLM AWQ-Triton baseline algorithm;
- `shapes`      GEMM shapes from a model card and TP size (`gemm_shapes`), batch sizes;
- `space`       the config space and its pre-compile filters (`build_space`), over
                `kernel_config` (`KernelConfig`, its keys, the default configs) and
                `resources` (the GPU's limits, the shared-memory and register models);
- `problems`    the inputs of one GEMM problem (L2-cold copies) and its reference;
- `bench`       the correctness gate and CUDA-graph timing (GPU);
- `strategies/` exhaustive and budgeted (Optuna TPE + neighbourhood) search;
- `compile`     parallel precompile of every binary a run may launch;
- `runner`      a tuning run (`tune`, `polish`, `tune_and_polish`), over:
  `work_items` (items, results), `item_search` (the search of one item), `objectives` (the
  GPU benchmark per item), `executors` (in-process and Ray), `result_cache` (the resumable
  JSONL cache), `polish` (the cross-check), `engine_defaults` (the engine-default margin) and
  `result_files` (`write_outputs`);
- `output`      engine file names, atomic merged writes, provenance sidecars and warnings;
- `shim`        loader for our own files (nearest-M lookup) and `int4_matmul`;
- `compare`     side-by-side timings and the budgeted-vs-exhaustive check for the report;
- `engine_kernel` an engine release's own kernel, imported or rebuilt (`engine_standalone`),
                and `engine_space` its config space;
- `install`     installing into an engine release, over `engine_site` (where it is),
  `tuned_files` (which files), `atomic_copy` (all or none) and `lookup_proof` (its own lookup).
"""
