#!/usr/bin/env bash
# RabbitMQ 4.3.6 (Debian sid) and 4.0.5 (Debian trixie) as real targets, each in a debootstrap
# chroot on loopback, using Debian's packages only; and 3.10.8 (Debian bookworm, the host's own
# version) in a chroot of its own, for clusters of 3.x nodes (classic mirrored queues) beside the
# host's single node. `all` is 4.3 and 4.0; 3.10 is built only when named.
#
#   scripts/rabbitmq4.sh build  [4.3|4.0|3.10|all]   create the chroot (cached; ~4 min, ~500 MB each)
#   scripts/rabbitmq4.sh up     [4.3|4.0|all]   build if needed, start the node, wait until ready
#   scripts/rabbitmq4.sh down   [4.3|4.0|all]   stop the node (rabbitmqctl stop, then the pid)
#   scripts/rabbitmq4.sh status [4.3|4.0|all]   say whether each node answers
#   scripts/rabbitmq4.sh env    [4.3|4.0|all]   print the URLs as shell assignments
#   scripts/rabbitmq4.sh ctl    4.3|4.0 ARGS...  rabbitmqctl against that node, e.g. for the harness:
#       AMQPC_RABBITMQCTL="scripts/rabbitmq4.sh ctl 4.3" amqp-conformance run --broker-admin rabbitmqctl ...
#   scripts/rabbitmq4.sh cluster up|down|status|env|ctl 4.3 ...   a cluster of NEW nodes beside the
#   scripts/rabbitmq4.sh node 4.3 I stop|start|kill              single one (rabbitmq4-cluster.sh)
#
# Rules:
# - The chroots live OUTSIDE the clone, in AMQPC_CHROOT_DIR (default
#   /var/cache/amqp-conformance/chroots), so a fresh clone (CI on this machine) reuses them.
#   A chroot is usable only once its stamp file exists; a half-built one is removed and rebuilt.
# - Everything is idempotent: `up` on a running node checks it and returns; `build` on a built
#   chroot returns at once. A lock per version serialises concurrent callers (CI and a developer).
# - Every wait is bounded (AMQPC_RMQ4_TIMEOUT seconds, default 180 for a start); a failure says
#   what failed and shows the end of the node's log.
# - The nodes share the host's epmd with the local RabbitMQ 3.10.8 (rabbit@…, 5672/15672/25672),
#   so they take other node names and ports (overridable, see `ports` below).
set -euo pipefail

CACHE=${AMQPC_CHROOT_DIR:-/var/cache/amqp-conformance/chroots}
MIRROR=${AMQPC_DEBIAN_MIRROR:-http://deb.debian.org/debian}
START_TIMEOUT=${AMQPC_RMQ4_TIMEOUT:-180}
BUILD_TIMEOUT=${AMQPC_RMQ4_BUILD_TIMEOUT:-1500}

die() { echo "rabbitmq4: $*" >&2; exit 1; }
log() { echo "rabbitmq4: $*" >&2; }

# version key -> Debian suite, expected package version prefix, node name, AMQP/management/dist ports
config() {
    case "$1" in
        4.3) SUITE=sid;    EXPECT=4.3.6; NODE=rmq43@localhost
             AMQP_PORT=${AMQPC_RMQ43_PORT:-5743}; MGMT_PORT=${AMQPC_RMQ43_MGMT_PORT:-15743}
             DIST_PORT=${AMQPC_RMQ43_DIST_PORT:-25743} ;;
        4.0) SUITE=trixie; EXPECT=4.0.5; NODE=rmq40@localhost
             AMQP_PORT=${AMQPC_RMQ40_PORT:-5740}; MGMT_PORT=${AMQPC_RMQ40_MGMT_PORT:-15740}
             DIST_PORT=${AMQPC_RMQ40_DIST_PORT:-25740} ;;
        3.10) SUITE=bookworm; EXPECT=3.10.8; NODE=rmq310@localhost
             AMQP_PORT=${AMQPC_RMQ310_PORT:-5710}; MGMT_PORT=${AMQPC_RMQ310_MGMT_PORT:-15710}
             DIST_PORT=${AMQPC_RMQ310_DIST_PORT:-25710} ;;
        *) die "unknown version '$1' (want 4.3, 4.0, 3.10 or all)" ;;
    esac
    ROOT="$CACHE/rabbitmq-$1"
    chroot_cmd
    STAMP="$ROOT/.amqpc-ready"
    # Outside the chroot: its /var/run is an absolute symlink that would resolve on the host.
    NODE_LOG="$CACHE/rabbitmq-$1.node.log"
    PIDFILE="$CACHE/rabbitmq-$1.pid"
}

versions() {
    case "${1:-all}" in
        all) echo 4.3 4.0 ;;
        *) echo "$1" ;;
    esac
}

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

mount_proc() {
    mountpoint -q "$ROOT/proc" || mount -t proc proc "$ROOT/proc"
}

# The environment every command inside the chroot runs under (node, ports, epmd on loopback),
# as an array so that it can follow `setsid` and `timeout`.
chroot_cmd() {
    IN_CHROOT=(chroot "$ROOT" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/var/lib/rabbitmq
        LANG=C.UTF-8 LC_ALL=C.UTF-8
        RABBITMQ_NODENAME="$NODE" RABBITMQ_NODE_IP_ADDRESS=127.0.0.1
        RABBITMQ_NODE_PORT="$AMQP_PORT" RABBITMQ_DIST_PORT="$DIST_PORT"
        ERL_EPMD_ADDRESS=127.0.0.1
        RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS="-kernel inet_dist_use_interface {127,0,0,1}")
}

write_config() {
    mkdir -p "$ROOT/etc/rabbitmq"
    cat >"$ROOT/etc/rabbitmq/rabbitmq.conf" <<EOF
# written by amqp-conformance scripts/rabbitmq4.sh on every start
listeners.tcp.default = 127.0.0.1:$AMQP_PORT
management.tcp.ip = 127.0.0.1
management.tcp.port = $MGMT_PORT
loopback_users.guest = true
EOF
}

build_one() {
    config "$1"
    if [ -f "$STAMP" ]; then return 0; fi
    command -v debootstrap >/dev/null || die "debootstrap is not installed (apt-get install debootstrap)"
    [ "$(id -u)" = 0 ] || die "building a chroot needs root"
    mkdir -p "$CACHE"
    if [ -e "$ROOT" ]; then
        log "removing the half-built chroot $ROOT"
        mountpoint -q "$ROOT/proc" && umount "$ROOT/proc"
        rm -rf --one-file-system "$ROOT"
    fi
    log "debootstrap $SUITE into $ROOT (a few minutes)"
    timeout "$BUILD_TIMEOUT" debootstrap --variant=minbase "$SUITE" "$ROOT" "$MIRROR" \
        >"$CACHE/rabbitmq-$1.debootstrap.log" 2>&1 \
        || die "debootstrap $SUITE failed; see $CACHE/rabbitmq-$1.debootstrap.log"
    # No service starts inside the chroot during package installation.
    printf '#!/bin/sh\nexit 101\n' >"$ROOT/usr/sbin/policy-rc.d"
    chmod 755 "$ROOT/usr/sbin/policy-rc.d"
    cp /etc/hosts "$ROOT/etc/hosts"
    mount_proc
    log "installing rabbitmq-server in $ROOT"
    # The suite's Release file may have expired relative to this machine's clock.
    timeout "$BUILD_TIMEOUT" chroot "$ROOT" env DEBIAN_FRONTEND=noninteractive \
        sh -c 'apt-get -q -o Acquire::Check-Valid-Until=false update &&
               apt-get install -y -q --no-install-recommends rabbitmq-server' \
        >"$CACHE/rabbitmq-$1.apt.log" 2>&1 \
        || die "installing rabbitmq-server failed; see $CACHE/rabbitmq-$1.apt.log"
    local installed
    installed=$(chroot "$ROOT" dpkg-query -W -f '${Version}' rabbitmq-server)
    case "$installed" in
        "$EXPECT"*) ;;
        *) die "$SUITE now ships rabbitmq-server $installed, not $EXPECT" ;;
    esac
    "${IN_CHROOT[@]}" rabbitmq-plugins enable --offline rabbitmq_management >/dev/null \
        || die "could not enable rabbitmq_management in $ROOT"
    echo "$installed" >"$STAMP"
    log "chroot ready: rabbitmq-server $installed"
}

node_answers() {
    port_open "$AMQP_PORT" && port_open "$MGMT_PORT" \
        && curl -fsS -m 5 -u guest:guest "http://127.0.0.1:$MGMT_PORT/api/overview" >/dev/null 2>&1
}

node_pid() {
    [ -f "$PIDFILE" ] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null && cat "$PIDFILE"
}

up_one() {
    build_one "$1"
    config "$1"
    if node_answers; then
        node_pid >/dev/null || log "$NODE: port $AMQP_PORT answers but no pid file"
        return 0
    fi
    for p in "$AMQP_PORT" "$MGMT_PORT" "$DIST_PORT"; do
        port_open "$p" && die "port $p is taken by another process; set AMQPC_RMQ${1/./}_*PORT"
    done
    cp /etc/hosts "$ROOT/etc/hosts"
    mount_proc
    write_config
    log "starting $NODE (RabbitMQ $(cat "$STAMP")) on 127.0.0.1:$AMQP_PORT, management $MGMT_PORT"
    setsid "${IN_CHROOT[@]}" /usr/lib/rabbitmq/bin/rabbitmq-server >"$NODE_LOG" 2>&1 </dev/null 9>&- &
    echo $! >"$PIDFILE"
    local deadline=$((SECONDS + START_TIMEOUT))
    until node_answers; do
        if ! node_pid >/dev/null; then
            tail -n 30 "$NODE_LOG" >&2 || true
            die "$NODE exited during start; log: $NODE_LOG"
        fi
        if [ "$SECONDS" -ge "$deadline" ]; then
            tail -n 30 "$NODE_LOG" >&2 || true
            die "$NODE not ready within ${START_TIMEOUT}s; log: $NODE_LOG"
        fi
        sleep 1
    done
    log "$NODE ready: amqp://guest:guest@127.0.0.1:$AMQP_PORT/ admin http://guest:guest@127.0.0.1:$MGMT_PORT"
}

down_one() {
    config "$1"
    [ -f "$STAMP" ] || { log "$1: no chroot, nothing to stop"; return 0; }
    local pid
    pid=$(node_pid || true)
    if port_open "$AMQP_PORT" || [ -n "$pid" ]; then
        timeout 60 "${IN_CHROOT[@]}" rabbitmqctl -n "$NODE" stop >/dev/null 2>&1 \
            || log "$NODE: rabbitmqctl stop failed, signalling the process"
        if [ -n "$pid" ]; then
            local deadline=$((SECONDS + 30))
            while kill -0 "$pid" 2>/dev/null && [ "$SECONDS" -lt "$deadline" ]; do sleep 1; done
            kill -0 "$pid" 2>/dev/null && kill -TERM -- "-$pid" 2>/dev/null || true
        fi
    fi
    rm -f "$PIDFILE"
    if port_open "$AMQP_PORT"; then die "$NODE still listens on $AMQP_PORT"; fi
    # The cluster's nodes share the chroot's /proc.
    ( cluster_running "$1" ) || { mountpoint -q "$ROOT/proc" && umount "$ROOT/proc" || true; }
    log "$NODE stopped"
}

status_one() {
    config "$1"
    if [ ! -f "$STAMP" ]; then echo "$1: not built ($ROOT)"; return 1; fi
    if node_answers; then
        echo "$1: up, RabbitMQ $(cat "$STAMP"), amqp://guest:guest@127.0.0.1:$AMQP_PORT/ admin http://guest:guest@127.0.0.1:$MGMT_PORT"
    else
        echo "$1: down, RabbitMQ $(cat "$STAMP") built in $ROOT"; return 1
    fi
}

env_one() {
    config "$1"
    local key="RMQ${1/./}"
    echo "AMQPC_${key}_URL=amqp://guest:guest@127.0.0.1:$AMQP_PORT/"
    echo "AMQPC_${key}_ADMIN=http://guest:guest@127.0.0.1:$MGMT_PORT"
}

with_lock() {
    mkdir -p "$CACHE"
    exec 9>"$CACHE/.lock-$2"
    flock -w "$BUILD_TIMEOUT" 9 || die "another rabbitmq4.sh holds $CACHE/.lock-$2"
    "$1" "$2"
    exec 9>&-
}

# shellcheck source=scripts/rabbitmq4-cluster.sh
. "$(dirname "${BASH_SOURCE[0]}")/rabbitmq4-cluster.sh"

cmd=${1:-}
target=${2:-all}
rc=0
case "$cmd" in
    build) for v in $(versions "$target"); do with_lock build_one "$v"; done ;;
    up) for v in $(versions "$target"); do with_lock up_one "$v"; done ;;
    down) for v in $(versions "$target"); do with_lock down_one "$v"; done ;;
    status) for v in $(versions "$target"); do status_one "$v" || rc=1; done ;;
    env) for v in $(versions "$target"); do env_one "$v"; done ;;
    ctl) config "$target"; [ -f "$STAMP" ] || die "$target: no chroot (scripts/rabbitmq4.sh up $target)"
         shift 2; exec "${IN_CHROOT[@]}" rabbitmqctl -n "$NODE" "$@" ;;
    cluster) shift; cluster_main "$@" ;;
    node) [ $# -eq 4 ] || die "usage: $0 node 4.3|4.0|3.10 INDEX stop|start|kill"
          cluster_locked "$2" node_control "$2" "$3" "$4" ;;
    *) echo "usage: $0 {build|up|down|status|env} [4.3|4.0|3.10|all] | ctl 4.3|4.0|3.10 ARGS..." \
            "| cluster {up [N]|down|status|env|ctl I ARGS} 4.3|4.0|3.10 | node 4.3|4.0|3.10 I stop|start|kill" >&2; exit 4 ;;
esac
exit "$rc"
