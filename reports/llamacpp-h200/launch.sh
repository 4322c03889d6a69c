#!/usr/bin/env bash
# llamacpp server with the configuration autotune found best in sweep llamacpp-h200.
# engine: llamacpp==0.3.36
# generated: 2026-11-30 12:20:01 UTC by autotune 0.1.0
#
# Run:      ./launch.sh          (override with MODEL_PATH=... HOST=... PORT=... ./launch.sh)
# Service:  autotune-llamacpp-h200.service beside this file (systemd).
set -euo pipefail

# What you will most likely change; the environment wins over these defaults.
[[ -n "${MODEL_PATH:-}" ]] || MODEL_PATH=/root/.cache/autotune/llama-server/models/autotune-1b-s0.gguf
[[ -n "${HOST:-}" ]] || HOST=127.0.0.1
[[ -n "${PORT:-}" ]] || PORT=8080
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

exec /root/.cache/autotune/llama-server/0.3.36/bin/llama-server \
  --model "${MODEL_PATH}" \
  --host "${HOST}" \
  --port "${PORT}" \
  --parallel 8 \
  --ctx-size 32768 \
  --batch-size 4096 \
  --ubatch-size 256 \
  --flash-attn on \
  --cache-type-k q4_0 \
  --cache-type-v q4_0 \
  --cache-reuse 64 \
  --fit off \
  --spec-type ngram-map-k \
  --metrics \
  --verbosity 4 \
  --spec-ngram-map-k-size-m 8
