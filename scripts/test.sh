#!/usr/bin/env bash
# Full test run, as used by `make test` and CI (.ci/run).
# Expects: services installed (scripts/services.sh install) and .venv ready (make venv).
#
# Starts the private PostgreSQL/Redis and the Docker engine, then runs: the sandbox image
# build (cached after the first run); lint; pytest on SQLite; pytest on PostgreSQL.
# Every step runs even if an earlier one failed; the exit status is
# non-zero if any step failed (pytest exit code 5, "no tests collected", counts as a
# failure). Services are always stopped at the end.
set -uo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1
PY=.venv/bin/python

# shellcheck disable=SC2317  # invoked via trap
cleanup() { bash scripts/services.sh stop || true; }
trap cleanup EXIT

bash scripts/services.sh start || exit 1
eval "$(bash scripts/services.sh env)"
export TEST_POSTGRES_URL TEST_REDIS_URL SANDBOX_EGRESS_STATE_DIR SANDBOX_DNS_UPSTREAM
export SANDLOT_CHROMIUM="${SANDLOT_CHROMIUM:-/usr/bin/chromium}"
unset TEST_DATABASE_URL

# Random test order (pytest-randomly), one seed for both passes, printed so a failure that
# depends on order can be replayed: SANDLOT_TEST_SEED=<seed> make test.
SEED="${SANDLOT_TEST_SEED:-$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')}"
echo "==> random test order, seed $SEED (replay: SANDLOT_TEST_SEED=$SEED make test)"

results=()
failed=0

step() {
    local name="$1"
    shift
    echo
    echo "==> $name"
    "$@"
    local rc=$?
    if [ "$rc" -eq 0 ]; then
        results+=("PASS  $name")
    else
        failed=1
        local why="exit $rc"
        [ "$rc" -eq 5 ] && why="exit 5: no tests collected"
        results+=("FAIL  $name ($why)")
    fi
}

# Backend tests need the images; under CI=true they fail (not skip) without them.
step "sandbox images" bash scripts/sandbox-image.sh
# Same commands as `make lint`, run as two steps so both always report.
step "ruff" .venv/bin/ruff check app tests bench
step "lint-imports" .venv/bin/lint-imports
# Two pytest-xdist workers (one per core; SANDLOT_TEST_WORKERS to change), each test file
# on one worker so its module fixtures are built once; each worker has its own database.
WORKERS="${SANDLOT_TEST_WORKERS:-2}"
PYTEST=(-m pytest -p no:cacheprovider -p randomly -q --randomly-seed="$SEED"
        -n "$WORKERS" --dist loadfile --durations=25)
step "pytest (sqlite, seed $SEED)" env -u TEST_DATABASE_URL "$PY" "${PYTEST[@]}"
step "pytest (postgres, seed $SEED)" env TEST_DATABASE_URL="$TEST_POSTGRES_URL" \
    "$PY" "${PYTEST[@]}"

echo
echo "==> summary"
printf '  %s\n' "${results[@]}"
exit "$failed"
