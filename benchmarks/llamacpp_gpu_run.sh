#!/usr/bin/env bash
# The GPU run behind reports/llamacpp-h200/: build llama-server with CUDA, write the ~1B random
# GGUF, run examples/llamacpp-h200.yaml, and leave the report folder (plus the sweep database and
# the llama-server logs) as OUT/report.tar.gz. Each step reuses what a previous call on the same
# machine left (the build cache, the model), so a second call goes straight to the sweep.
#
#   benchmarks/llamacpp_gpu_run.sh OUT [--sdist FILE] [--smoke] [--max-trials N] [--wall-clock S]
#
# --sdist: a llama-cpp-python sdist (or `scripts/build-llama-server --slim-sdist` copy) for hosts
# without PyPI. --smoke: two trials, no finalists (checks the chain end to end).
# Env: PYTHON (default python3), JOBS (build jobs, default: all cores).
set -euo pipefail
out=${1:?usage: benchmarks/llamacpp_gpu_run.sh OUT [--sdist FILE] [--smoke] [--max-trials N] [--wall-clock S]}
shift
sdist=()
sweep_args=()
name=llamacpp-h200
while [ $# -gt 0 ]; do
  case "$1" in
    --sdist) sdist=(--sdist "${2:?--sdist needs a file}"); shift ;;
    --smoke) sweep_args+=(--max-trials 2); name=llamacpp-h200-smoke ;;
    --max-trials) sweep_args+=(--max-trials "${2:?}"); shift ;;
    --wall-clock) sweep_args+=(--wall-clock "${2:?}"); shift ;;
    *) echo "llamacpp_gpu_run: unknown option '$1'" >&2; exit 2 ;;
  esac
  shift
done
repo=$(cd "$(dirname "$0")/.." && pwd)
py=${PYTHON:-python3}
mkdir -p "$out"
out=$(cd "$out" && pwd)
log() { echo "[llamacpp_gpu_run $(date +%T)] $*" | tee -a "$out/run.log" >&2; }

nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv >"$out/nvidia-smi.txt" 2>&1 || true
log "building llama-server (CUDA)"
t0=$(date +%s)
bin=$("$repo/scripts/build-llama-server" --cuda --jobs "${JOBS:-$(nproc)}" "${sdist[@]}" 2>>"$out/build.log" | tail -1)
log "llama-server: $bin ($(( $(date +%s) - t0 )) s)"
"$bin" --version >>"$out/run.log" 2>&1 || true

log "writing the 1b model"
model=$(cd "$repo" && "$py" -m autotune.testing.gguf_models 1b | tail -1)
log "model: $model ($(du -h "$model" | cut -f1))"

spec=$out/$name.yaml
sed -e "s|^name: llamacpp-h200$|name: $name|" -e "s|^  model: .*|  model: $model|" \
  "$repo/examples/llamacpp-h200.yaml" >"$spec"
if [ "$name" = llamacpp-h200-smoke ]; then
  "$py" - "$spec" <<'PY'
import sys, yaml
p = sys.argv[1]
d = yaml.safe_load(open(p))
d["finalists"] = {"top_k": 0}
d["search"]["refine"] = 0
open(p, "w").write(yaml.safe_dump(d, sort_keys=False))
PY
fi
log "sweep $name"
set +e
(cd "$repo" && AUTOTUNE_LLAMA_SERVER=$bin "$py" -m autotune sweep "$spec" --db "$out/autotune.db" \
  --out "$out/$name" "${sweep_args[@]}" --json >"$out/sweep.json" 2>"$out/sweep.log")
rc=$?
set -e
log "sweep exit $rc"
tail -5 "$out/sweep.log" >&2 || true
cp "$out/autotune.db" "$out/$name/" 2>/dev/null || true
tar -czf "$out/report.tar.gz" -C "$out" "$name" run.log build.log sweep.log sweep.json nvidia-smi.txt "$(basename "$spec")"
log "wrote $out/report.tar.gz"
exit $rc
