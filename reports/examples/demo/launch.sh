#!/usr/bin/env bash
# sglang server with the configuration autotune found best in sweep demo-20261130-112225.
# engine: sglang==0.5.17
# generated: 2026-11-30 11:23:47 UTC by autotune 0.1.0
# SIMULATED: the sweep measured autotune's simulated engine, not a real GPU. This script runs the
# real engine with the winning flags; check its numbers on your machine before relying on them.
#
# Run:      ./launch.sh          (override with MODEL_PATH=... HOST=... PORT=... ./launch.sh)
# Service:  autotune-demo-20261130-112225.service beside this file (systemd).
set -euo pipefail

# What you will most likely change; the environment wins over these defaults.
# MODEL_PATH: the sweep used autotune's built-in card 'qwen3.8-27b-awq-int4', which is not a path: point MODEL_PATH at the model folder or hub id the engine should load
[[ -n "${MODEL_PATH:-}" ]] || MODEL_PATH=qwen3.8-27b-awq-int4
[[ -n "${HOST:-}" ]] || HOST=127.0.0.1
[[ -n "${PORT:-}" ]] || PORT=30000
[[ -n "${PYTHON:-}" ]] || PYTHON=python3

if ! [[ "${PORT}" =~ ^[0-9]+$ ]] || (( PORT < 1 || PORT > 65535 )); then
  echo "launch.sh: PORT must be a number from 1 to 65535, got '${PORT}'" >&2
  exit 2
fi
check_host="${HOST}"
case "${check_host}" in 0.0.0.0 | "::" | "") check_host=127.0.0.1 ;; esac
if (exec 3<>"/dev/tcp/${check_host}/${PORT}") 2>/dev/null; then
  echo "launch.sh: port ${PORT} on ${check_host} is already in use; stop that server or set PORT" >&2
  exit 1
fi

exec "${PYTHON}" -m sglang.launch_server \
  --model-path "${MODEL_PATH}" \
  --host "${HOST}" \
  --port "${PORT}" \
  --context-length 131072 \
  --mem-fraction-static 0.9 \
  --chunked-prefill-size 8192 \
  --page-size 64 \
  --kv-cache-dtype auto \
  --max-mamba-cache-size 24 \
  --speculative-algorithm NGRAM \
  --speculative-num-steps 5 \
  --speculative-num-draft-tokens 2 \
  --reasoning-parser qwen3 \
  --tool-call-parser qwen3_coder \
  --enable-metrics
