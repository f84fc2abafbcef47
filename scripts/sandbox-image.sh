#!/usr/bin/env bash
# Build the sandbox images locally, once, and cache them (no image registry is reachable).
#
#   scripts/sandbox-image.sh [base|busybox|all]   (default: all)
#
#   sandlot/sandbox:base     Debian minbase (bookworm) + python3, python3-venv (the skill
#                            installer's `python3 -m venv` needs ensurepip),
#                            ca-certificates, and for the web terminal procps (top, ps),
#                            vim-tiny (vim) and less, from debootstrap against the Debian
#                            mirror apt uses on this machine
#   sandlot/sandbox:busybox  a ~1 MB busybox-static rootfs for fast tests
#
# Both have a non-root user `sandbox` (uid/gid 1000, home /home/sandbox) and /workspace
# (with input/ and output/) owned by it; the backend runs commands as that user unless
# root is asked for. CMD is `sleep infinity`, WORKDIR /workspace.
#
# Cache: an image already in the engine with the current recipe label is kept. The
# rootfs tarball is kept in $SANDLOT_STATE_DIR/images/, so a new engine (or a wiped
# data root) re-imports it in seconds instead of re-running debootstrap.
#
# Environment:
#   SANDLOT_STATE_DIR       (default <repo>/.state)
#   SANDLOT_DOCKER_HOST     docker endpoint (default unix:///var/run/docker.sock)
#   SANDLOT_DEBIAN_MIRROR   override the mirror (default: read from apt's sources)
#   SANDLOT_DEBIAN_SUITE    (default bookworm)
#   SANDLOT_IMAGE_REBUILD=1 rebuild the rootfs and re-import even if cached
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
STATE_DIR="${SANDLOT_STATE_DIR:-$REPO_ROOT/.state}"
case "$STATE_DIR" in /*) ;; *) STATE_DIR="$PWD/$STATE_DIR" ;; esac
IMAGES_DIR="$STATE_DIR/images"
SUITE="${SANDLOT_DEBIAN_SUITE:-bookworm}"
REBUILD="${SANDLOT_IMAGE_REBUILD:-0}"
export DOCKER_HOST="${SANDLOT_DOCKER_HOST:-unix:///var/run/docker.sock}"

BASE_IMAGE=sandlot/sandbox:base
BUSYBOX_IMAGE=sandlot/sandbox:busybox
# Bump when the rootfs recipe below changes: images and tarballs of another recipe
# are rebuilt.
RECIPE=5
SANDBOX_UID=1000
PATH_ENV=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin

log() { echo "sandbox-image: $*" >&2; }
die() { echo "sandbox-image: ERROR: $*" >&2; exit 1; }

# The first Debian mirror apt is configured with for the main archive (not security),
# from deb822 .sources files or one-line .list files.
debian_mirror() {
    if [ -n "${SANDLOT_DEBIAN_MIRROR:-}" ]; then
        echo "$SANDLOT_DEBIAN_MIRROR"
        return
    fi
    local f uri
    for f in /etc/apt/sources.list.d/*.sources; do
        [ -f "$f" ] || continue
        # deb822: one paragraph per source; want Types: deb, our suite, not disabled.
        uri="$(awk -v suite="$SUITE" 'BEGIN { RS = ""; FS = "\n" }
            {
                types = ""; suites = ""; uri = ""; enabled = ""
                for (i = 1; i <= NF; i++) {
                    line = $i
                    if (line ~ /^#/) continue
                    key = tolower(line); sub(/:.*/, "", key)
                    val = line; sub(/^[^:]*:[[:space:]]*/, "", val)
                    if (key == "types") types = " " val " "
                    if (key == "uris") { split(val, u, /[[:space:]]+/); uri = u[1] }
                    if (key == "suites") suites = " " val " "
                    if (key == "enabled") enabled = tolower(val)
                }
                if (types ~ / deb / && suites ~ (" " suite " ") && enabled != "no" && uri != "") {
                    print uri; exit
                }
            }' "$f")"
        [ -n "$uri" ] && { echo "$uri"; return; }
    done
    for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
        [ -f "$f" ] || continue
        uri="$(awk -v suite="$SUITE" '$1 == "deb" {
                i = 2
                if ($i ~ /^\[/) { while ($i !~ /\]$/ && i < NF) i++; i++ }
                if ($(i + 1) == suite) { print $i; exit }
            }' "$f")"
        [ -n "$uri" ] && { echo "$uri"; return; }
    done
    return 0
}

image_current() {
    local label
    label="$(docker image inspect --format '{{index .Config.Labels "sandlot.recipe"}}' "$1" 2>/dev/null)" ||
        return 1
    [ "$label" = "$RECIPE" ]
}

# Adds the sandbox user, its home and /workspace to a rootfs.
add_sandbox_user() {
    local root="$1" shell="$2"
    grep -q '^sandbox:' "$root/etc/passwd" ||
        echo "sandbox:x:$SANDBOX_UID:$SANDBOX_UID:Sandlot sandbox:/home/sandbox:$shell" >>"$root/etc/passwd"
    grep -q '^sandbox:' "$root/etc/group" || echo "sandbox:x:$SANDBOX_UID:" >>"$root/etc/group"
    if [ -f "$root/etc/shadow" ] && ! grep -q '^sandbox:' "$root/etc/shadow"; then
        echo 'sandbox:!:19000:0:99999:7:::' >>"$root/etc/shadow"
    fi
    mkdir -p "$root/home/sandbox" "$root/workspace/input" "$root/workspace/output"
    chown -R "$SANDBOX_UID:$SANDBOX_UID" "$root/home/sandbox" "$root/workspace"
    chmod 755 "$root/home/sandbox" "$root/workspace"
    mkdir -p "$root/tmp"
    chmod 1777 "$root/tmp"
}

# Packs a rootfs directory into a tarball atomically.
pack() {
    local root="$1" tarball="$2"
    tar --numeric-owner --xattrs -C "$root" -cf "$tarball.tmp" .
    mv "$tarball.tmp" "$tarball"
}

import_image() {
    local tarball="$1" tag="$2"
    log "importing $tarball as $tag"
    docker import \
        --change 'CMD ["sleep", "infinity"]' \
        --change 'WORKDIR /workspace' \
        --change "ENV PATH=$PATH_ENV" \
        --change 'ENV LANG=C.UTF-8' \
        --change 'ENV PYTHONDONTWRITEBYTECODE=1' \
        --change "LABEL sandlot.recipe=$RECIPE" \
        "$tarball" "$tag" >/dev/null
}

build_base_rootfs() {
    local tarball="$1" mirror root
    command -v debootstrap >/dev/null 2>&1 || die "debootstrap not found (run: scripts/services.sh install)"
    mirror="$(debian_mirror)"
    [ -n "$mirror" ] || die "no Debian mirror for $SUITE in /etc/apt/sources*; set SANDLOT_DEBIAN_MIRROR"
    root="$IMAGES_DIR/base-rootfs.tmp"
    rm -rf "$root"
    mkdir -p "$root"
    log "debootstrap --variant=minbase $SUITE from $mirror (log: $IMAGES_DIR/debootstrap.log)"
    if ! debootstrap --variant=minbase \
        --include=python3,python3-venv,ca-certificates,procps,vim-tiny,less \
        "$SUITE" "$root" "$mirror" >"$IMAGES_DIR/debootstrap.log" 2>&1; then
        tail -n 30 "$IMAGES_DIR/debootstrap.log" >&2
        [ -f "$root/debootstrap/debootstrap.log" ] && tail -n 30 "$root/debootstrap/debootstrap.log" >&2
        die "debootstrap failed"
    fi
    add_sandbox_user "$root" /bin/bash
    # The terminal's `vim` (vim-tiny names itself vim.tiny and vi).
    [ -e "$root/usr/bin/vim" ] || ln -s vim.tiny "$root/usr/bin/vim"
    # Smaller image: package caches and lists are not needed to run commands.
    rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/cache/apt/*.bin \
        "$root"/var/lib/apt/lists/* "$root"/var/log/*.log "$root"/debootstrap
    pack "$root" "$tarball"
    rm -rf "$root"
}

build_busybox_rootfs() {
    local tarball="$1" root applet
    [ -x /bin/busybox ] || die "/bin/busybox not found (apt-get install busybox-static)"
    root="$IMAGES_DIR/busybox-rootfs.tmp"
    rm -rf "$root"
    mkdir -p "$root"/{bin,etc,root,tmp,proc,sys,dev,usr/bin,sbin,usr/sbin}
    cp /bin/busybox "$root/bin/busybox"
    for applet in $(/bin/busybox --list); do
        [ -e "$root/bin/$applet" ] || ln -s busybox "$root/bin/$applet"
    done
    printf 'root:x:0:0:root:/root:/bin/sh\n' >"$root/etc/passwd"
    printf 'root:x:0:\n' >"$root/etc/group"
    add_sandbox_user "$root" /bin/sh
    pack "$root" "$tarball"
    rm -rf "$root"
}

# ensure IMAGE TARBALL BUILDER: import from the cached tarball, building it first if needed.
ensure() {
    local image="$1" tarball="$2" builder="$3" t0
    if [ "$REBUILD" != 1 ] && image_current "$image"; then
        log "$image present (recipe $RECIPE)"
        return 0
    fi
    mkdir -p "$IMAGES_DIR"
    t0=$SECONDS
    if [ "$REBUILD" = 1 ] || [ ! -s "$tarball" ]; then
        log "building rootfs for $image"
        "$builder" "$tarball"
    fi
    import_image "$tarball" "$image"
    log "$image ready in $((SECONDS - t0)) s"
}

main() {
    command -v docker >/dev/null 2>&1 || die "docker CLI not found"
    [ "$(id -u)" -eq 0 ] || die "run as root (debootstrap and file ownership need it)"
    timeout 10 docker version >/dev/null 2>&1 ||
        die "Docker engine not reachable at $DOCKER_HOST (run: scripts/services.sh docker-start)"
    case "${1:-all}" in
        base) ensure "$BASE_IMAGE" "$IMAGES_DIR/sandbox-base-$SUITE-r$RECIPE.tar" build_base_rootfs ;;
        busybox) ensure "$BUSYBOX_IMAGE" "$IMAGES_DIR/sandbox-busybox-r$RECIPE.tar" build_busybox_rootfs ;;
        all)
            main busybox
            main base
            ;;
        *)
            echo "usage: $0 [base|busybox|all]" >&2
            exit 2
            ;;
    esac
}

main "$@"
