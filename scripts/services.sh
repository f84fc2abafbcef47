#!/usr/bin/env bash
# Private PostgreSQL + Redis for local testing and CI.
#
#   scripts/services.sh install   apt-get install what tests need (postgresql, redis, chromium, fonts,
#                                 and the Docker engine: docker.io, nftables, iproute2, debootstrap)
#   scripts/services.sh install-run  apt-get install what `make run` needs (python3-venv, Docker engine)
#   scripts/services.sh start     start private pg (127.0.0.1:$SANDLOT_PG_PORT), redis (127.0.0.1:$SANDLOT_REDIS_PORT)
#                                 and the Docker engine (one dockerd; an already running one is reused)
#   scripts/services.sh stop      stop what `start` started (nothing else; a reused dockerd keeps running)
#                                 and the sandbox DNS resolver whose state is in $SANDLOT_STATE_DIR/egress
#   scripts/services.sh docker-start / docker-stop   only the Docker engine (what `make run` uses)
#   scripts/services.sh env       print export lines for TEST_POSTGRES_URL / TEST_REDIS_URL, and the
#                                 sandbox egress settings tests use (SANDBOX_EGRESS_STATE_DIR under the
#                                 state dir; SANDBOX_DNS_UPSTREAM a closed local port, so no lookup
#                                 from a test sandbox leaves the machine)
#
# Environment:
#   SANDLOT_PG_PORT     (default 55432)
#   SANDLOT_REDIS_PORT  (default 56379)
#   SANDLOT_STATE_DIR   (default <repo>/.state; git-ignored)
#   SANDLOT_PG_BIN      (default: newest /usr/lib/postgresql/*/bin)
#   SANDLOT_WAIT        seconds to wait for each service to accept connections (default 30)
#   SANDLOT_DOCKER_WAIT seconds to wait for dockerd to answer (default 90)
#   SANDLOT_DOCKER_STORAGE_DRIVER  force a storage driver (default: overlay2 if an overlay mount
#                       works on the data root, else vfs)
#   SANDLOT_DOCKER_DATA_ROOT       dockerd --data-root (default /var/lib/docker)
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
# Service logs are for this machine's administrator only (0600), like Sandlot's own files.
private_log() { touch "$1" && chmod 600 "$1"; }

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
    mapfile -t -O "${#missing[@]}" missing < <(docker_missing_pkgs)

    apt_install "${missing[@]}"
}

# The Docker engine and what the sandbox image build and network policy need.
# docker.io brings dockerd, containerd, runc and iptables (nft flavour on Debian 12).
# nftables: the egress rules (table inet sandlot); iproute2: `ip netns` in the egress tests.
# The egress DNS resolver is Python (dnslib, from requirements.txt), started on demand.
docker_missing_pkgs() {
    command -v dockerd >/dev/null 2>&1 || echo docker.io
    command -v nft >/dev/null 2>&1 || echo nftables
    command -v ip >/dev/null 2>&1 || echo iproute2
    command -v debootstrap >/dev/null 2>&1 || echo debootstrap
    [ -x /bin/busybox ] || echo busybox-static
}

# What `make run` needs on a fresh Debian machine beyond python3 itself.
cmd_install_run() {
    local missing=()
    python3 -c 'import ensurepip, venv' 2>/dev/null || missing+=(python3-venv)
    mapfile -t -O "${#missing[@]}" missing < <(docker_missing_pkgs)
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
    # Package scripts must not start daemons (docker.io ships an init script that would
    # start a second, unmanaged dockerd): we start what we need by hand. Debian's
    # policy-rc.d hook says no; add one only for this install if the machine has none.
    local policy=/usr/sbin/policy-rc.d added_policy=0
    if [ ! -e "$policy" ]; then
        printf '#!/bin/sh\n# sandlot services.sh: no daemon starts during apt-get install\nexit 101\n' |
            "${sudo[@]}" tee "$policy" >/dev/null
        "${sudo[@]}" chmod 755 "$policy"
        added_policy=1
    fi
    local rc=0
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -q &&
        "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
            --no-install-recommends "${missing[@]}" || rc=$?
    [ "$added_policy" -eq 0 ] || "${sudo[@]}" rm -f "$policy"
    return "$rc"
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
        chmod 600 "$PG_LOG"
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
        private_log "$REDIS_LOG"
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

# SIGTERM `pid` (named `what` in messages) and wait up to `seconds` for it to exit.
stop_and_wait() {
    local what="$1" pid="$2" seconds="$3" i=0
    log "stopping $what (pid $pid)"
    kill -TERM "$pid"
    while kill -0 "$pid" 2>/dev/null; do
        i=$((i + 1))
        [ "$i" -lt $((seconds * 10)) ] || die "$what (pid $pid) did not stop"
        sleep 0.1
    done
}

redis_stop() {
    local pid
    if pid="$(redis_pid)"; then
        stop_and_wait redis "$pid" "$WAIT"
        rm -f "$REDIS_PIDFILE"
    else
        log "redis not running"
    fi
}

# ---------------------------------------------------------------- docker engine

# One dockerd for the machine (decisions 1): reuse one that already answers on the
# default socket, else start our own by hand (no systemd) and remember its pid.
DOCKER_SOCK=/var/run/docker.sock
DOCKER_WAIT="${SANDLOT_DOCKER_WAIT:-90}"
DOCKER_DATA_ROOT="${SANDLOT_DOCKER_DATA_ROOT:-/var/lib/docker}"
DOCKERD_PIDFILE="$STATE_DIR/dockerd.pid"
DOCKERD_LOG="$STATE_DIR/dockerd.log"

docker_answers() {
    timeout 10 docker -H "unix://$DOCKER_SOCK" version >/dev/null 2>&1
}

# Prints the pid of the dockerd this script started (pidfile + a live dockerd), or fails.
dockerd_pid() {
    [ -f "$DOCKERD_PIDFILE" ] || return 1
    local pid
    pid="$(cat "$DOCKERD_PIDFILE" 2>/dev/null)"
    [[ "$pid" =~ ^[0-9]+$ ]] || return 1
    kill -0 "$pid" 2>/dev/null || return 1
    tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q '^dockerd ' || return 1
    echo "$pid"
}

# Does an overlay mount work on the filesystem that will hold the data root? Mounting
# one for real is the only honest test (overlay on overlay or on some FUSE/9p roots fails).
overlay_works() {
    grep -qw overlay /proc/filesystems 2>/dev/null || modprobe overlay 2>/dev/null || return 1
    mkdir -p "$DOCKER_DATA_ROOT"
    local d ok=1
    d="$(mktemp -d "$DOCKER_DATA_ROOT/.sandlot-overlay-probe.XXXXXX")" || return 1
    mkdir "$d/lower" "$d/upper" "$d/work" "$d/merged"
    echo probe >"$d/lower/file"
    if mount -t overlay overlay \
        -o "lowerdir=$d/lower,upperdir=$d/upper,workdir=$d/work" "$d/merged" 2>/dev/null; then
        if [ "$(cat "$d/merged/file" 2>/dev/null)" = probe ] && echo x >"$d/merged/new" 2>/dev/null; then
            ok=0
        fi
        umount "$d/merged" 2>/dev/null || true
    fi
    rm -rf "$d"
    return "$ok"
}

pick_storage_driver() {
    if [ -n "${SANDLOT_DOCKER_STORAGE_DRIVER:-}" ]; then
        echo "$SANDLOT_DOCKER_STORAGE_DRIVER"
    elif overlay_works; then
        echo overlay2
    else
        echo vfs
    fi
}

# Starts dockerd with the given storage driver and waits (bounded) until it answers.
# Fails, leaving its log, if it exits or does not answer in time.
dockerd_launch() {
    local driver="$1"
    log "starting dockerd (storage driver $driver, data root $DOCKER_DATA_ROOT, log $DOCKERD_LOG)"
    private_log "$DOCKERD_LOG"
    echo "=== $(date -u +%FT%TZ) services.sh: dockerd --storage-driver=$driver" >>"$DOCKERD_LOG"
    # setsid: its own session, so a Ctrl-C in the terminal that ran `make` does not kill it.
    setsid dockerd --host "unix://$DOCKER_SOCK" --data-root "$DOCKER_DATA_ROOT" \
        --storage-driver "$driver" --exec-opt native.cgroupdriver=cgroupfs \
        </dev/null >>"$DOCKERD_LOG" 2>&1 &
    echo "$!" >"$DOCKERD_PIDFILE"
    local pid=$! i=0
    until docker_answers; do
        if ! kill -0 "$pid" 2>/dev/null; then
            rm -f "$DOCKERD_PIDFILE"
            return 1
        fi
        i=$((i + 1))
        if [ "$i" -ge "$DOCKER_WAIT" ]; then
            log "dockerd (pid $pid) not answering after ${DOCKER_WAIT}s; stopping it"
            kill -TERM "$pid" 2>/dev/null || true
            rm -f "$DOCKERD_PIDFILE"
            return 1
        fi
        sleep 1
    done
}

# A dockerd killed uncleanly leaves pidfiles; if their pid was reused, dockerd refuses
# to start or adopts the wrong "containerd". Only called when no dockerd runs.
clear_stale_pidfiles() {
    local file pid want
    for file in /var/run/docker.pid:dockerd /var/run/docker/containerd/containerd.pid:containerd; do
        want="${file##*:}"
        file="${file%:*}"
        [ -f "$file" ] || continue
        pid="$(cat "$file" 2>/dev/null)"
        if ! [[ "$pid" =~ ^[0-9]+$ ]] || [ "$(cat "/proc/$pid/comm" 2>/dev/null)" != "$want" ]; then
            log "removing stale $file"
            rm -f "$file"
        fi
    done
}

docker_start() {
    command -v dockerd >/dev/null 2>&1 || die "dockerd not found (run: $0 install)"
    is_root || die "dockerd must be started as root"
    mkdir -p "$STATE_DIR"
    local pid
    if docker_answers; then
        if pid="$(dockerd_pid)"; then
            log "dockerd already running (pid $pid, ours)"
        else
            log "reusing the dockerd that answers on $DOCKER_SOCK (not ours; stop leaves it)"
        fi
        return 0
    fi
    # A dockerd that runs but does not answer is starting (another `start`) or dying:
    # wait for one or the other rather than start a second one.
    local i=0
    while pid="$(pgrep -x dockerd | head -n 1)" && [ -n "$pid" ]; do
        if docker_answers; then
            log "dockerd (pid $pid) now answers; reusing it"
            return 0
        fi
        i=$((i + 1))
        [ "$i" -lt "$DOCKER_WAIT" ] ||
            die "a dockerd (pid $pid) runs but does not answer on $DOCKER_SOCK; only one may run"
        sleep 1
    done
    rm -f "$DOCKERD_PIDFILE"
    clear_stale_pidfiles

    local driver
    driver="$(pick_storage_driver)"
    if ! dockerd_launch "$driver"; then
        if [ "$driver" = overlay2 ] && [ -z "${SANDLOT_DOCKER_STORAGE_DRIVER:-}" ]; then
            tail -n 15 "$DOCKERD_LOG" >&2 || true
            log "dockerd failed with overlay2; retrying with vfs"
            driver=vfs
            dockerd_launch "$driver" || { tail -n 30 "$DOCKERD_LOG" >&2; die "dockerd failed to start"; }
        else
            tail -n 30 "$DOCKERD_LOG" >&2 || true
            die "dockerd failed to start (log: $DOCKERD_LOG)"
        fi
    fi
    log "dockerd ready: unix://$DOCKER_SOCK (pid $(cat "$DOCKERD_PIDFILE"), storage driver" \
        "$(docker -H "unix://$DOCKER_SOCK" info --format '{{.Driver}}' 2>/dev/null))"
}

docker_stop() {
    local pid
    if pid="$(dockerd_pid)"; then
        # dockerd stops its containers first (up to 15 s each, in parallel).
        stop_and_wait dockerd "$pid" "$DOCKER_WAIT"
        rm -f "$DOCKERD_PIDFILE"
    elif docker_answers; then
        log "dockerd not started by this script; leaving it running"
    else
        log "dockerd not running"
    fi
}

# ---------------------------------------------------------------- egress resolver

# The app starts one sandbox DNS resolver per egress state dir, on demand; it exits by
# itself after a while without sandboxes. Stop the one serving our state dir now.
EGRESS_STATE_DIR="$STATE_DIR/egress"

egress_resolver_stop() {
    local pidfile="$EGRESS_STATE_DIR/resolver.pid" pid
    [ -f "$pidfile" ] || { log "egress resolver not running"; return 0; }
    pid="$(cat "$pidfile" 2>/dev/null)"
    if [[ "$pid" =~ ^[0-9]+$ ]] && kill -0 "$pid" 2>/dev/null &&
        tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qE 'app[.]backends[.](docker[.])?egress[.]dns'; then
        log "stopping egress resolver (pid $pid)"
        kill -TERM "$pid"
        local i=0
        while kill -0 "$pid" 2>/dev/null; do
            i=$((i + 1))
            [ "$i" -lt $((WAIT * 10)) ] || die "egress resolver (pid $pid) did not stop"
            sleep 0.1
        done
    else
        log "egress resolver not running"
    fi
}

# ---------------------------------------------------------------- main

cmd_env() {
    echo "export TEST_POSTGRES_URL=postgresql+psycopg://postgres@127.0.0.1:$PG_PORT/$PG_DB"
    echo "export TEST_REDIS_URL=redis://127.0.0.1:$REDIS_PORT/0"
    echo "export SANDBOX_EGRESS_STATE_DIR=$EGRESS_STATE_DIR"
    echo "export SANDBOX_DNS_UPSTREAM=\${SANDBOX_DNS_UPSTREAM:-127.0.0.1:9}"
}

case "${1:-}" in
    install) cmd_install ;;
    install-run) cmd_install_run ;;
    start)
        pg_start
        redis_start
        docker_start
        ;;
    stop)
        rc=0
        (egress_resolver_stop) || rc=1
        (docker_stop) || rc=1
        (redis_stop) || rc=1
        (pg_stop) || rc=1
        exit "$rc"
        ;;
    docker-start) docker_start ;;
    docker-stop) docker_stop ;;
    env) cmd_env ;;
    *)
        echo "usage: $0 {install|install-run|start|stop|docker-start|docker-stop|env}" >&2
        exit 2
        ;;
esac
