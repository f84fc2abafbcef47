#!/usr/bin/env bash
# Run every bench/bench_*.py with the private PostgreSQL/Redis started (stopped at the end).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

trap 'bash scripts/services.sh stop || true' EXIT
bash scripts/services.sh start
bash scripts/sandbox-image.sh  # bench_exec runs commands in the sandbox image
eval "$(bash scripts/services.sh env)"
export TEST_POSTGRES_URL TEST_REDIS_URL

shopt -s nullglob
files=(bench/bench_*.py)
if [ "${#files[@]}" -eq 0 ]; then
    echo "bench: no bench/bench_*.py files found" >&2
    exit 1
fi
for f in "${files[@]}"; do
    echo "==> $f"
    .venv/bin/python "$f"
done
