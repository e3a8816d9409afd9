#!/usr/bin/env bash
# GarageMQ (Debian package garagemq) on loopback ports of its own, for `amqp-conformance grid`
# targets and by hand: `scripts/garagemq.sh up [AMQP_PORT [ADMIN_PORT]]` starts it in the
# background (a copy of /etc/garagemq/config.yaml with the ports and the data directory changed,
# under /tmp/amqpc-garagemq-PORT) and returns once it answers on its AMQP port (at most 30 s);
# `scripts/garagemq.sh down [AMQP_PORT]` stops it. Defaults: 5790 and 15790.
set -euo pipefail
action=${1:-}; port=${2:-5790}; admin=${3:-1${port}}
dir=/tmp/amqpc-garagemq-$port
die() { echo "garagemq: $*" >&2; exit 1; }
case "$action" in
up)
    command -v garagemq >/dev/null || die "not installed (apt-get install garagemq)"
    [ -f /etc/garagemq/config.yaml ] || die "/etc/garagemq/config.yaml missing (apt-get install garagemq)"
    if [ -f "$dir/pid" ] && kill -0 "$(cat "$dir/pid")" 2>/dev/null; then echo "garagemq: already up on $port"; exit 0; fi
    for _ in $(seq 50); do  # a GarageMQ just stopped may still hold the port (at most 10 s)
        (exec 3<>/dev/tcp/127.0.0.1/"$port") 2>/dev/null || break
        sleep 0.2
    done
    rm -rf "$dir"; mkdir -p "$dir/db"
    sed -e "/^tcp:/,/^[a-z]/ s/^  port: .*/  port: $port/" -e "/^admin:/,/^[a-z]/ s/^  port: .*/  port: $admin/" \
        -e "s|^  defaultPath: /var/lib/garagemq/db.*|  defaultPath: $dir/db|" /etc/garagemq/config.yaml > "$dir/config.yaml"
    grep -q "port: $port" "$dir/config.yaml" || die "could not set the port in the config copy"
    # The daemon alone in the background, every descriptor of it redirected and in a session of its
    # own: a caller that captures this script's output (the grid's `start`) sees EOF when the
    # script ends. (A backgrounded `cd && garagemq` list forks a subshell that keeps the caller's
    # pipes open as long as GarageMQ runs, and $! is then that subshell, not GarageMQ.)
    cd "$dir"
    setsid garagemq --config "$dir/config.yaml" --log-level warning < /dev/null > "$dir/log" 2>&1 &
    echo $! > "$dir/pid"
    for _ in $(seq 150); do
        (exec 3<>/dev/tcp/127.0.0.1/"$port") 2>/dev/null && { echo "garagemq: up: amqp://guest:guest@127.0.0.1:$port/"; exit 0; }
        kill -0 "$(cat "$dir/pid")" 2>/dev/null || die "exited: $(tail -n 3 "$dir/log")"
        sleep 0.2
    done
    die "no answer on 127.0.0.1:$port within 30 s" ;;
down)
    [ -f "$dir/pid" ] || exit 0
    pid=$(cat "$dir/pid"); kill "$pid" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
    kill -9 "$pid" 2>/dev/null || true
    # gone, its ports with it: an `up` right after (the grid restarts a wedged GarageMQ) must bind them
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
    rm -rf "$dir" ;;
*) die "usage: $0 up|down [AMQP_PORT [ADMIN_PORT]]" ;;
esac
