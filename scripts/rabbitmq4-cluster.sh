# shellcheck shell=bash
# RabbitMQ clusters in the chroots of scripts/rabbitmq4.sh. Sourced by rabbitmq4.sh,
# which dispatches to it; only functions here, they use its config/chroot_cmd/port_open/die/log.
#
#   scripts/rabbitmq4.sh cluster up     4.3 [N=3]   start N NEW nodes, join 2..N to node 1, wait
#   scripts/rabbitmq4.sh cluster down   4.3         stop every node of the cluster, forget it
#   scripts/rabbitmq4.sh cluster status 4.3         the running nodes as node 1 (or another) sees them
#   scripts/rabbitmq4.sh cluster env    4.3         the nodes' URLs as shell assignments
#   scripts/rabbitmq4.sh cluster ctl    4.3 I ARGS  rabbitmqctl against node I
#   scripts/rabbitmq4.sh node 4.3 I stop|start|kill a --node-control template:
#       amqp-conformance ... --node-control "scripts/rabbitmq4.sh node 4.3 {index} {action}"
#
# Rules:
# - The cluster's nodes are independent of the single node of `up` (rmq43@localhost, 5743):
#   other node names (rabbitc1..rabbitcN@localhost for 4.3, rabbitd* for 4.0, rabbite* for 3.10),
#   their own AMQP, management and distribution ports (4.3: 5751.., 15751.., 25751..; 4.0: 5761..;
#   3.10: 5771..), their own
#   config file (RABBITMQ_CONFIG_FILE) and mnesia base. They share the chroot, its Erlang cookie
#   and the host's epmd. The single node is never joined, stopped or restarted from here.
# - `cluster up` on a cluster whose N nodes all run returns at once; anything else (a partial
#   or stale cluster) is stopped and wiped, and N fresh nodes are started and joined.
# - `node I stop` returns only when node I's process is gone, its port is closed and another node
#   no longer counts it among the running nodes; `node I start` only when its port answers and
#   another node counts it as running. `kill` is an abrupt failure (SIGKILL), waited like stop.
# - Every wait is bounded (AMQPC_RMQ4_TIMEOUT for a start, AMQPC_RMQ4_NODE_TIMEOUT, default 120,
#   for a node action) and polls with a deadline; a failure names the node and its log.

NODE_TIMEOUT=${AMQPC_RMQ4_NODE_TIMEOUT:-120}

# version, index -> the node's name, ports, files, and IN_CHROOT for it
cluster_node() {
    config "$1"
    local i=$2 base letter
    case "$1" in
        4.3) base=${AMQPC_RMQ43_CLUSTER_PORT:-5750}; letter=c ;;
        4.0) base=${AMQPC_RMQ40_CLUSTER_PORT:-5760}; letter=d ;;
        3.10) base=${AMQPC_RMQ310_CLUSTER_PORT:-5770}; letter=e ;;
    esac
    NODE="rabbit$letter$i@localhost"
    AMQP_PORT=$((base + i)); MGMT_PORT=$((10000 + base + i)); DIST_PORT=$((20000 + base + i))
    CONF_IN=/etc/rabbitmq/amqpc-cluster/rabbit$letter$i.conf
    MNESIA_IN=/var/lib/rabbitmq/amqpc-cluster/rabbit$letter$i
    NODE_LOG="$CACHE/rabbitmq-$1.cluster$i.log"
    PIDFILE="$CACHE/rabbitmq-$1.cluster$i.pid"
    SIZEFILE="$CACHE/rabbitmq-$1.cluster.size"
    chroot_cmd
    IN_CHROOT+=(RABBITMQ_CONFIG_FILE="$CONF_IN" RABBITMQ_MNESIA_BASE="$MNESIA_IN"
        RABBITMQ_LOG_BASE=/var/log/rabbitmq/amqpc-cluster)
}

cluster_size() {
    cluster_node "$1" 1
    [ -f "$SIZEFILE" ] && cat "$SIZEFILE"
}

# rabbitmqctl against node I (quietly, bounded)
cluster_ctl() {
    local v=$1 i=$2
    shift 2
    cluster_node "$v" "$i"
    timeout 60 "${IN_CHROOT[@]}" rabbitmqctl -q -n "$NODE" "$@"
}

# The running nodes as node I sees them, one a line (nothing if node I does not answer)
running_nodes_seen_by() {
    cluster_ctl "$1" "$2" cluster_status --formatter json 2>/dev/null \
        | python3 -c 'import json,sys; print("\n".join(json.load(sys.stdin).get("running_nodes", [])))' \
        2>/dev/null || true
}

# Another live node than I, for looking at I from outside
witness_of() {
    local v=$1 i=$2 n j
    n=$(cluster_size "$v") || return 1
    for j in $(seq 1 "$n"); do
        [ "$j" = "$i" ] && continue
        cluster_node "$v" "$j"
        if port_open "$AMQP_PORT"; then echo "$j"; return 0; fi
    done
    return 1
}

node_process() {
    [ -f "$PIDFILE" ] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null && cat "$PIDFILE"
}

start_node_process() {
    cluster_node "$1" "$2"
    node_process >/dev/null && return 0
    for p in "$AMQP_PORT" "$MGMT_PORT" "$DIST_PORT"; do
        port_open "$p" && die "port $p is taken by another process (node $NODE)"
    done
    mkdir -p "$ROOT$(dirname "$CONF_IN")" "$ROOT$MNESIA_IN" "$ROOT/var/log/rabbitmq/amqpc-cluster"
    cat >"$ROOT$CONF_IN" <<EOF
# written by amqp-conformance scripts/rabbitmq4-cluster.sh on every start
listeners.tcp.default = 127.0.0.1:$AMQP_PORT
management.tcp.ip = 127.0.0.1
management.tcp.port = $MGMT_PORT
loopback_users.guest = true
EOF
    chroot "$ROOT" chown -R rabbitmq:rabbitmq /var/lib/rabbitmq/amqpc-cluster /var/log/rabbitmq/amqpc-cluster \
        2>/dev/null || true
    setsid "${IN_CHROOT[@]}" /usr/lib/rabbitmq/bin/rabbitmq-server >"$NODE_LOG" 2>&1 </dev/null 9>&- &
    echo $! >"$PIDFILE"
}

# Wait until node I has booted (its port answers, rabbitmqctl await_startup), bounded
await_node_boot() {
    cluster_node "$1" "$2"
    local deadline=$((SECONDS + START_TIMEOUT))
    until port_open "$AMQP_PORT"; do
        node_process >/dev/null || { tail -n 30 "$NODE_LOG" >&2; die "$NODE exited during start; log: $NODE_LOG"; }
        [ "$SECONDS" -lt "$deadline" ] || { tail -n 30 "$NODE_LOG" >&2; die "$NODE not listening within ${START_TIMEOUT}s; log: $NODE_LOG"; }
        sleep 0.5
    done
    timeout "$START_TIMEOUT" "${IN_CHROOT[@]}" rabbitmqctl -q -n "$NODE" await_startup >/dev/null 2>&1 \
        || die "$NODE did not finish booting; log: $NODE_LOG"
}

# Wait until node W (which answers) counts NAME among the running nodes (want=in) or not (want=out)
await_seen() {
    local v=$1 w=$2 name=$3 want=$4 timeout=$5 seen
    local deadline=$((SECONDS + timeout))
    while :; do
        seen=$(running_nodes_seen_by "$v" "$w" | tr '\n' ' ')
        if [ -n "$seen" ]; then
            case " $seen" in
                *" $name "*) [ "$want" = in ] && return 0 ;;
                *) [ "$want" = out ] && return 0 ;;
            esac
        fi
        [ "$SECONDS" -lt "$deadline" ] \
            || die "within ${timeout}s node $w saw running [${seen% }], wanted $name $want"
        sleep 0.5
    done
}

cluster_names() {
    local v=$1 n=$2 skip=${3:-} j names=""
    for j in $(seq 1 "$n"); do
        [ "$j" = "$skip" ] && continue
        cluster_node "$v" "$j"; names+="$NODE "
    done
    echo "${names% }"
}

stop_node_process() {
    cluster_node "$1" "$2"
    local pid signal=${3:-}
    pid=$(node_process || true)
    if [ -n "$signal" ] && [ -n "$pid" ]; then
        kill "-$signal" -- "-$pid" 2>/dev/null || true
    elif [ -n "$pid" ] || port_open "$AMQP_PORT"; then
        timeout 60 "${IN_CHROOT[@]}" rabbitmqctl -q -n "$NODE" stop >/dev/null 2>&1 \
            || log "$NODE: rabbitmqctl stop failed, signalling the process"
    fi
    local deadline=$((SECONDS + NODE_TIMEOUT))
    while { [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; } || port_open "$AMQP_PORT"; do
        if [ "$SECONDS" -ge "$deadline" ]; then
            [ -n "$pid" ] && kill -KILL -- "-$pid" 2>/dev/null
            die "$NODE did not stop within ${NODE_TIMEOUT}s; log: $NODE_LOG"
        fi
        sleep 0.2
    done
    rm -f "$PIDFILE"
}

cluster_up() {
    local v=$1 n=${2:-3} i
    [[ "$n" =~ ^[0-9]+$ ]] && [ "$n" -ge 1 ] && [ "$n" -le 9 ] || die "cluster size '$n': want 1..9"
    build_one "$v"
    if [ "$(cluster_size "$v" || true)" = "$n" ] \
        && [ "$(running_nodes_seen_by "$v" 1 | sort | tr '\n' ' ')" = "$(cluster_names "$v" "$n" | tr ' ' '\n' | sort | tr '\n' ' ')" ]; then
        log "cluster of $n already running"; return 0
    fi
    cluster_down "$v"
    config "$v"; cp /etc/hosts "$ROOT/etc/hosts"; mount_proc
    echo "$n" >"$SIZEFILE"
    for i in $(seq 1 "$n"); do start_node_process "$v" "$i"; done
    for i in $(seq 1 "$n"); do await_node_boot "$v" "$i"; done
    local first; first=$(cluster_names "$v" 1)
    for i in $(seq 2 "$n"); do
        cluster_ctl "$v" "$i" stop_app >/dev/null || die "stop_app on node $i failed"
        cluster_ctl "$v" "$i" join_cluster "$first" >/dev/null || die "node $i could not join $first"
        cluster_ctl "$v" "$i" start_app >/dev/null || die "start_app on node $i failed"
    done
    for i in $(seq 2 "$n"); do
        cluster_node "$v" "$i"; await_seen "$v" 1 "$NODE" in "$START_TIMEOUT"
    done
    log "cluster of $n ready:"; cluster_env "$v" >&2
}

cluster_down() {
    local v=$1 n i
    n=$(cluster_size "$v" || true)
    # Also nodes of a bigger cluster started earlier whose size file was lost: pid files decide.
    for i in $(seq 1 "${n:-9}"); do
        cluster_node "$v" "$i"
        if node_process >/dev/null || port_open "$AMQP_PORT"; then stop_node_process "$v" "$i"; fi
    done
    cluster_node "$v" 1
    rm -rf --one-file-system "$ROOT/var/lib/rabbitmq/amqpc-cluster" "$ROOT/etc/rabbitmq/amqpc-cluster"
    rm -f "$SIZEFILE"
    [ -n "$n" ] && log "cluster of $n stopped and forgotten"
    return 0
}

cluster_running() {
    local v=$1 n i
    n=$(cluster_size "$v") || return 1
    for i in $(seq 1 "$n"); do cluster_node "$v" "$i"; node_process >/dev/null && return 0; done
    return 1
}

cluster_status() {
    local v=$1 n w
    n=$(cluster_size "$v") || { echo "$v: no cluster"; return 1; }
    w=$(witness_of "$v" 0) || { echo "$v: cluster of $n, no node answers"; return 1; }
    echo "$v: cluster of $n; running as node $w sees it: $(running_nodes_seen_by "$v" "$w" | tr '\n' ' ')"
}

cluster_env() {
    local v=$1 n i key="RMQ${1/./}"
    n=$(cluster_size "$v") || die "$v: no cluster (scripts/rabbitmq4.sh cluster up $v)"
    for i in $(seq 1 "$n"); do
        cluster_node "$v" "$i"
        echo "AMQPC_${key}_C${i}_URL=amqp://guest:guest@127.0.0.1:$AMQP_PORT/"
        echo "AMQPC_${key}_C${i}_ADMIN=http://guest:guest@127.0.0.1:$MGMT_PORT"
    done
}

node_control() {
    local v=$1 i=$2 action=$3 n w
    n=$(cluster_size "$v") || die "$v: no cluster (scripts/rabbitmq4.sh cluster up $v)"
    [[ "$i" =~ ^[0-9]+$ ]] && [ "$i" -ge 1 ] && [ "$i" -le "$n" ] || die "node index '$i': want 1..$n"
    cluster_node "$v" "$i"; local name=$NODE
    case "$action" in
        stop|kill)
            if [ "$action" = kill ]; then stop_node_process "$v" "$i" KILL; else stop_node_process "$v" "$i"; fi
            w=$(witness_of "$v" "$i") || { log "$name stopped (no other node runs)"; return 0; }
            await_seen "$v" "$w" "$name" out "$NODE_TIMEOUT" ;;
        start)
            start_node_process "$v" "$i"
            await_node_boot "$v" "$i"
            w=$(witness_of "$v" "$i") || { log "$name started (the only node running)"; return 0; }
            await_seen "$v" "$w" "$name" in "$NODE_TIMEOUT" ;;
        *) die "node action '$action': want stop, start or kill" ;;
    esac
    log "$name: $action done"
}

# Serialise cluster commands (one lock per version; fd 9, which node processes do not inherit)
cluster_locked() {
    local v=$1; shift
    mkdir -p "$CACHE"
    exec 9>"$CACHE/.lock-cluster-$v"
    flock -w "$BUILD_TIMEOUT" 9 || die "another rabbitmq4.sh holds $CACHE/.lock-cluster-$v"
    "$@"
    exec 9>&-
}

cluster_main() {
    local sub=${1:-} v=${2:-4.3}
    case "$v" in 4.3|4.0|3.10) ;; *) die "cluster: unknown version '$v' (want 4.3, 4.0 or 3.10)" ;; esac
    case "$sub" in
        up) cluster_locked "$v" cluster_up "$v" "${3:-3}" ;;
        down) cluster_locked "$v" cluster_down "$v" ;;
        status) cluster_status "$v" ;;
        env) cluster_env "$v" ;;
        ctl) [ -n "${3:-}" ] || die "cluster ctl $v: which node?"
             local i=$3; shift 3; cluster_node "$v" "$i"
             exec "${IN_CHROOT[@]}" rabbitmqctl -n "$NODE" "$@" ;;
        *) echo "usage: rabbitmq4.sh cluster {up [N]|down|status|env|ctl I ARGS...} 4.3|4.0|3.10" >&2; exit 4 ;;
    esac
}
