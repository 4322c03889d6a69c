#!/usr/bin/env bash
# llamacpp server with the configuration autotune found best in sweep llamacpp-h200.
# engine: llamacpp==0.3.36
# generated: 2026-12-02 03:57:42 UTC by autotune 0.1.0
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

exec /root/.cache/autotune/llama-server/0.3.36-cuda/bin/llama-server \
  --model "${MODEL_PATH}" \
  --host "${HOST}" \
  --port "${PORT}" \
  --parallel 16 \
  --batch-size 4096 \
  --ubatch-size 1024 \
  --flash-attn on \
  --cache-type-k f16 \
  --cache-type-v f16 \
  --cache-reuse 64 \
  --fit off \
  --threads 2 \
  --threads-batch 2 \
  --spec-type ngram-simple \
  --spec-ngram-simple-size-m 8 \
  --metrics \
  --verbosity 4
