#!/usr/bin/env bash
# Private PostgreSQL + Redis for local testing and CI.
#
#   scripts/services.sh install   apt-get install what tests need (postgresql, redis, chromium, fonts)
#   scripts/services.sh install-run  apt-get install what `make run` needs (python3-venv)
#   scripts/services.sh start     start private pg (127.0.0.1:$SANDLOT_PG_PORT) and redis (127.0.0.1:$SANDLOT_REDIS_PORT)
#   scripts/services.sh stop      stop what `start` started (nothing else)
#   scripts/services.sh env       print export lines for TEST_POSTGRES_URL / TEST_REDIS_URL
#
# Environment:
#   SANDLOT_PG_PORT     (default 55432)
#   SANDLOT_REDIS_PORT  (default 56379)
#   SANDLOT_STATE_DIR   (default <repo>/.state; git-ignored)
#   SANDLOT_PG_BIN      (default: newest /usr/lib/postgresql/*/bin)
#   SANDLOT_WAIT        seconds to wait for each service to accept connections (default 30)
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PG_PORT="${SANDLOT_PG_PORT:-55432}"
REDIS_PORT="${SANDLOT_REDIS_PORT:-56379}"
STATE_DIR="${SANDLOT_STATE_DIR:-$REPO_ROOT/.state}"
case "$STATE_DIR" in /*) ;; *) STATE_DIR="$PWD/$STATE_DIR" ;; esac
WAIT="${SANDLOT_WAIT:-30}"
PG_DB=sandlot_test
PG_OS_USER=postgres

REDIS_PIDFILE="$STATE_DIR/redis.pid"
REDIS_LOG="$STATE_DIR/redis.log"

log() { echo "services: $*" >&2; }
die() { echo "services: ERROR: $*" >&2; exit 1; }

is_root() { [ "$(id -u)" -eq 0 ]; }

# ---------------------------------------------------------------- install

pkg_installed() {
    dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'install ok installed'
}

find_pg_bin() {
    if [ -n "${SANDLOT_PG_BIN:-}" ]; then
        echo "$SANDLOT_PG_BIN"
        return
    fi
    local d
    # shellcheck disable=SC2012  # need version sort (15 > 9)
    d="$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)"
    if [ -n "$d" ] && [ -x "$d/initdb" ]; then
        echo "$d"
    fi
    return 0
}

cmd_install() {
    local missing=()
    if [ -z "$(find_pg_bin)" ]; then
        missing+=(postgresql)
    fi
    if ! command -v redis-server >/dev/null 2>&1 || ! command -v redis-cli >/dev/null 2>&1; then
        missing+=(redis-server)
    fi
    command -v chromium >/dev/null 2>&1 || missing+=(chromium)
    pkg_installed fonts-dejavu-core || missing+=(fonts-dejavu-core)

    apt_install "${missing[@]}"
}

# What `make run` needs on a fresh Debian machine beyond python3 itself.
cmd_install_run() {
    local missing=()
    python3 -c 'import ensurepip, venv' 2>/dev/null || missing+=(python3-venv)
    apt_install "${missing[@]}"
}

apt_install() {
    local missing=("$@")
    if [ "${#missing[@]}" -eq 0 ]; then
        log "install: nothing missing"
        return 0
    fi

    local sudo=()
    if ! is_root; then
        command -v sudo >/dev/null 2>&1 || die "need root (or sudo) to apt-get install: ${missing[*]}"
        sudo=(sudo)
    fi
    log "install: apt-get install ${missing[*]}"
    if [[ " ${missing[*]} " == *" postgresql "* ]]; then
        # Don't let the Debian package create and start a system "main" cluster on :5432;
        # we run our own private one.
        "${sudo[@]}" mkdir -p /etc/postgresql-common/createcluster.d
        echo 'create_main_cluster = false' |
            "${sudo[@]}" tee /etc/postgresql-common/createcluster.d/sandlot-no-main-cluster.conf \
                >/dev/null
    fi
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -q
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
        "${missing[@]}"
}

# ---------------------------------------------------------------- postgres

PG_BIN=""
PG_DIR=""
PG_LOG=""

# Run a command as the postgres OS user when we are root (initdb refuses root),
# otherwise as ourselves.
as_pg() {
    if is_root; then
        runuser -u "$PG_OS_USER" -- "$@"
    else
        "$@"
    fi
}

pg_setup_paths() {
    PG_BIN="$(find_pg_bin)"
    [ -n "$PG_BIN" ] || die "PostgreSQL server binaries not found (run: $0 install, or set SANDLOT_PG_BIN)"
    # The data dir must be reachable by the postgres OS user. If the checkout lives under a
    # directory it cannot search (e.g. /root), fall back to a fixed per-checkout dir in /tmp.
    local base="$STATE_DIR"
    if is_root && id -u "$PG_OS_USER" >/dev/null 2>&1 &&
        ! runuser -u "$PG_OS_USER" -- test -x "$STATE_DIR" 2>/dev/null; then
        base="/tmp/sandlot-pg-$(printf '%s' "$STATE_DIR" | cksum | cut -d' ' -f1)"
    fi
    PG_DIR="$base/pg"
    PG_LOG="$base/pg.log"
}

ensure_pg_user() {
    is_root || return 0
    if ! id -u "$PG_OS_USER" >/dev/null 2>&1; then
        log "creating OS user $PG_OS_USER"
        useradd --system --user-group --home-dir /var/lib/postgresql --shell /bin/bash "$PG_OS_USER"
    fi
}

pg_running() {
    [ -f "$PG_DIR/PG_VERSION" ] || return 1
    as_pg "$PG_BIN/pg_ctl" status -D "$PG_DIR" >/dev/null 2>&1
}

pg_start() {
    ensure_pg_user
    mkdir -p "$STATE_DIR"
    pg_setup_paths
    if [ "$(dirname "$PG_DIR")" != "$STATE_DIR" ]; then
        log "user $PG_OS_USER cannot reach $STATE_DIR; using $(dirname "$PG_DIR") for postgres"
        mkdir -p "$(dirname "$PG_DIR")"
        chmod 755 "$(dirname "$PG_DIR")"
    fi
    if is_root && ! runuser -u "$PG_OS_USER" -- test -x "$(dirname "$PG_DIR")"; then
        die "OS user $PG_OS_USER cannot reach $(dirname "$PG_DIR"); set SANDLOT_STATE_DIR"
    fi

    if pg_running; then
        log "postgres already running ($PG_DIR)"
    else
        if [ ! -f "$PG_DIR/PG_VERSION" ]; then
            log "initdb $PG_DIR"
            rm -rf "$PG_DIR"
            mkdir -p "$PG_DIR"
            is_root && chown "$PG_OS_USER:" "$PG_DIR"
            chmod 700 "$PG_DIR"
            as_pg "$PG_BIN/initdb" -D "$PG_DIR" -U postgres --auth=trust \
                --encoding=UTF8 --no-locale --no-sync >"$PG_LOG" 2>&1 ||
                { cat "$PG_LOG" >&2; die "initdb failed"; }
            as_pg tee -a "$PG_DIR/postgresql.conf" >/dev/null <<'EOF'

# --- sandlot local test settings (scripts/services.sh) ---
listen_addresses = '127.0.0.1'
unix_socket_directories = ''
fsync = off
synchronous_commit = off
full_page_writes = off
max_connections = 100
EOF
        fi
        : >"$PG_LOG"
        is_root && chown "$PG_OS_USER:" "$PG_LOG"
        log "starting postgres on 127.0.0.1:$PG_PORT"
        if ! as_pg "$PG_BIN/pg_ctl" start -D "$PG_DIR" -l "$PG_LOG" -o "-p $PG_PORT" \
            -w -t "$WAIT" >/dev/null; then
            tail -n 30 "$PG_LOG" >&2 || true
            die "postgres failed to start (log: $PG_LOG)"
        fi
    fi

    local i=0
    until "$PG_BIN/pg_isready" -q -h 127.0.0.1 -p "$PG_PORT" -U postgres; do
        i=$((i + 1))
        if [ "$i" -ge "$WAIT" ]; then
            tail -n 30 "$PG_LOG" >&2 || true
            die "postgres not accepting connections on 127.0.0.1:$PG_PORT after ${WAIT}s"
        fi
        sleep 1
    done

    local exists
    exists="$("$PG_BIN/psql" -h 127.0.0.1 -p "$PG_PORT" -U postgres -d postgres -tAq \
        -c "SELECT 1 FROM pg_database WHERE datname = '$PG_DB'")" ||
        die "cannot query postgres on 127.0.0.1:$PG_PORT"
    if [ "$exists" != 1 ]; then
        log "creating database $PG_DB"
        "$PG_BIN/createdb" -h 127.0.0.1 -p "$PG_PORT" -U postgres "$PG_DB"
    fi
    log "postgres ready: 127.0.0.1:$PG_PORT/$PG_DB"
}

pg_stop() {
    pg_setup_paths
    if pg_running; then
        log "stopping postgres ($PG_DIR)"
        as_pg "$PG_BIN/pg_ctl" stop -D "$PG_DIR" -m fast -w -t "$WAIT" >/dev/null ||
            die "postgres did not stop"
    else
        log "postgres not running"
    fi
}

# ---------------------------------------------------------------- redis

# Prints the pid of *our* redis (from our pidfile, and only if that pid really is a
# redis-server), or fails.
redis_pid() {
    [ -f "$REDIS_PIDFILE" ] || return 1
    local pid
    pid="$(cat "$REDIS_PIDFILE" 2>/dev/null)"
    [[ "$pid" =~ ^[0-9]+$ ]] || return 1
    kill -0 "$pid" 2>/dev/null || return 1
    grep -q 'redis-server' "/proc/$pid/cmdline" 2>/dev/null || return 1
    echo "$pid"
}

redis_start() {
    command -v redis-server >/dev/null 2>&1 || die "redis-server not found (run: $0 install)"
    mkdir -p "$STATE_DIR"
    if redis_pid >/dev/null; then
        log "redis already running (pid $(redis_pid))"
    else
        rm -f "$REDIS_PIDFILE"
        log "starting redis on 127.0.0.1:$REDIS_PORT"
        redis-server --bind 127.0.0.1 --port "$REDIS_PORT" \
            --save '' --appendonly no \
            --daemonize yes --pidfile "$REDIS_PIDFILE" --logfile "$REDIS_LOG" \
            --dir "$STATE_DIR" ||
            { tail -n 30 "$REDIS_LOG" >&2 || true; die "redis-server failed to start"; }
    fi

    local i=0
    until [ "$(redis-cli -h 127.0.0.1 -p "$REDIS_PORT" ping 2>/dev/null)" = PONG ]; do
        i=$((i + 1))
        if [ "$i" -ge "$WAIT" ]; then
            tail -n 30 "$REDIS_LOG" >&2 || true
            die "redis not answering PING on 127.0.0.1:$REDIS_PORT after ${WAIT}s"
        fi
        sleep 1
    done
    # The PONG could come from someone else's redis on that port; make sure ours is up.
    redis_pid >/dev/null || {
        tail -n 30 "$REDIS_LOG" >&2 || true
        die "redis on 127.0.0.1:$REDIS_PORT answers but is not ours (pidfile $REDIS_PIDFILE)"
    }
    log "redis ready: 127.0.0.1:$REDIS_PORT"
}

redis_stop() {
    local pid
    if pid="$(redis_pid)"; then
        log "stopping redis (pid $pid)"
        kill -TERM "$pid"
        local i=0
        while kill -0 "$pid" 2>/dev/null; do
            i=$((i + 1))
            [ "$i" -lt $((WAIT * 10)) ] || die "redis (pid $pid) did not stop"
            sleep 0.1
        done
        rm -f "$REDIS_PIDFILE"
    else
        log "redis not running"
    fi
}

# ---------------------------------------------------------------- main

cmd_env() {
    echo "export TEST_POSTGRES_URL=postgresql+psycopg://postgres@127.0.0.1:$PG_PORT/$PG_DB"
    echo "export TEST_REDIS_URL=redis://127.0.0.1:$REDIS_PORT/0"
}

case "${1:-}" in
    install) cmd_install ;;
    install-run) cmd_install_run ;;
    start)
        pg_start
        redis_start
        ;;
    stop)
        rc=0
        (redis_stop) || rc=1
        (pg_stop) || rc=1
        exit "$rc"
        ;;
    env) cmd_env ;;
    *)
        echo "usage: $0 {install|start|stop|env}" >&2
        exit 2
        ;;
esac
