#!/bin/sh
# Start, stop or install a private RabbitMQ 3.10 (Debian's rabbitmq-server) used as the oracle for
# compat_tests/ and bench/.  Everything it owns lives under one state directory keyed by the AMQP
# port, so it never touches /var/lib/rabbitmq, never collides with our broker on 5672, and a second
# `start` first stops the node left by the first.
#
#   .ci/rabbitmq.sh install                 apt-get install rabbitmq-server if it is missing
#   .ci/rabbitmq.sh start [AMQP] [MGMT]     default 5673 15673; prints the AMQP URL when ready
#   .ci/rabbitmq.sh stop  [AMQP]            stops the node and removes its state directory
#   .ci/rabbitmq.sh status [AMQP]
#   .ci/rabbitmq.sh kill AMQP               kill -9 the node, keeping its state (a crash)
#   .ci/rabbitmq.sh resume AMQP [MGMT]      start a killed node again on its state
#   .ci/rabbitmq.sh ctl AMQP ARGS...     rabbitmqctl ARGS for that node (e.g. stop_app, start_app)
#   .ci/rabbitmq.sh queues AMQP ARGS...  rabbitmq-queues ARGS for that node (e.g. add_member)
#   .ci/rabbitmq.sh cluster start N BASEPORT
#                                           N clustered nodes compat<PORT>@localhost on AMQP ports
#                                           BASEPORT..BASEPORT+N-1 (management +10000, Erlang dist
#                                           +20000, one shared cookie); prints one AMQP URL a line
#   .ci/rabbitmq.sh cluster stop N BASEPORT stops those nodes and removes their state
#
# Environment: RMQ_STATE_ROOT (default ${TMPDIR:-/tmp}), RMQ_START_TIMEOUT seconds (default 90),
# RMQ_EXTRA_CONF (a file of rabbitmq.conf lines added to the node's, e.g. TLS listeners).
# Works as root in a container without systemd: the Debian wrapper in /usr/sbin is bypassed (it
# would `su rabbitmq`) and the server script in /usr/lib/rabbitmq/bin is run directly, in the
# background, with its own node name, mnesia, log, config, plugins file and Erlang cookie.
# RabbitMQ defaults are kept on purpose (frame_max 131072, heartbeat 60, max_message_size 128 MiB in
# 3.10, consumer_timeout 30 min); the tests do not depend on shortened timeouts. One exception:
# message rates are sampled every second (collect_statistics_interval, default 5 s), and quorum
# queues report to the management API every second (quorum_tick_interval, default 5 s), so tests
# that wait for a rate or for a policy to show on a queue wait one second, not five or ten.
set -eu

RMQ_BIN=/usr/lib/rabbitmq/bin
CMD=${1:-start}
STATE_ROOT=${RMQ_STATE_ROOT:-${TMPDIR:-/tmp}}
START_TIMEOUT=${RMQ_START_TIMEOUT:-90}
# Empty: each node gets its own cookie. A cluster sets one for all its nodes (Erlang requires it).
COOKIE=""

log() { echo "rabbitmq.sh: $*" >&2; }

# The node every function below acts on: its ports, state directory and name.
select_node() {
    AMQP_PORT=$1
    MGMT_PORT=$2
    BASE="$STATE_ROOT/rabbitmq-compat-$AMQP_PORT"
    NODE="compat$AMQP_PORT@localhost"
}

# Every rabbitmq* command must see the same node name, cookie (via HOME) and env file.
node_env() {
    export HOME="$BASE"
    export RABBITMQ_NODENAME="$NODE"
    export RABBITMQ_NODE_IP_ADDRESS=127.0.0.1
    export RABBITMQ_NODE_PORT="$AMQP_PORT"
    # Erlang distribution port; default would be AMQP+20000, pin it to avoid surprises.
    export RABBITMQ_DIST_PORT=$((AMQP_PORT + 20000))
    export RABBITMQ_MNESIA_BASE="$BASE/mnesia"
    export RABBITMQ_LOG_BASE="$BASE/log"
    export RABBITMQ_CONFIG_FILE="$BASE/rabbitmq.conf"
    export RABBITMQ_ADVANCED_CONFIG_FILE="$BASE/advanced.config"
    export RABBITMQ_ENABLED_PLUGINS_FILE="$BASE/enabled_plugins"
    export RABBITMQ_PID_FILE="$BASE/rabbitmq.pid"
    export RABBITMQ_CONF_ENV_FILE="$BASE/rabbitmq-env.conf"
    export RABBITMQ_PLUGINS_EXPAND_DIR="$BASE/plugins-expand"
    # Short node names on "localhost" work without DNS.
    export RABBITMQ_USE_LONGNAME=false
}

ctl() { "$RMQ_BIN/rabbitmqctl" -n "$NODE" "$@"; }

port_open() {
    python3 - "$1" <<'EOF'
import socket, sys
s = socket.socket()
s.settimeout(1)
try:
    s.connect(("127.0.0.1", int(sys.argv[1])))
except OSError:
    sys.exit(1)
s.close()
EOF
}

do_install() {
    if [ -x "$RMQ_BIN/rabbitmq-server" ]; then
        log "rabbitmq-server already installed"
        return 0
    fi
    apt-get update
    DEBIAN_FRONTEND=noninteractive apt-get install -y rabbitmq-server
    # The package may start a system node under systemd/init; we only want our private one.
    if command -v service >/dev/null 2>&1; then service rabbitmq-server stop >/dev/null 2>&1 || true; fi
}

do_stop() {
    [ -d "$BASE" ] || { log "no node state at $BASE"; return 0; }
    node_env
    # beam.pid is the rabbitmq-server script we started; rabbitmq.pid is the beam.smp it spawned.
    pids=""
    for f in "$BASE/rabbitmq.pid" "$BASE/beam.pid"; do
        [ -f "$f" ] && pids="$pids $(cat "$f")"
    done
    # a node of a cluster being stopped can hang in `rabbitmqctl stop` (seen once in CI, 300 s);
    # give it a minute, then the pids below are killed
    timeout 60 "$RMQ_BIN/rabbitmqctl" -n "$NODE" stop >/dev/null 2>&1 || true
    for pid in $pids; do
        i=0
        while kill -0 "$pid" 2>/dev/null && [ $i -lt 30 ]; do sleep 0.5; i=$((i + 1)); done
        if kill -0 "$pid" 2>/dev/null; then
            log "pid $pid did not stop, killing it"
            kill -9 "$pid" 2>/dev/null || true
        fi
    done
    rm -rf "$BASE"
    log "stopped $NODE"
}

write_config() {
    mkdir -p "$BASE/mnesia" "$BASE/log" "$BASE/plugins-expand"
    cat >"$BASE/rabbitmq.conf" <<EOF
listeners.tcp.1 = 127.0.0.1:$AMQP_PORT
management.tcp.port = $MGMT_PORT
management.tcp.ip = 127.0.0.1
loopback_users.guest = true
log.console = false
log.file.level = info
collect_statistics_interval = 1000
EOF
    # RMQ_EXTRA_CONF: a file of more rabbitmq.conf lines (e.g. TLS listeners), appended as is
    if [ -n "${RMQ_EXTRA_CONF:-}" ]; then cat "$RMQ_EXTRA_CONF" >>"$BASE/rabbitmq.conf"; fi
    echo "[{rabbit, [{quorum_tick_interval, 1000}]}]." >"$BASE/advanced.config"
    echo "[rabbitmq_management]." >"$BASE/enabled_plugins"
    : >"$BASE/rabbitmq-env.conf"
    # A fixed cookie for this private node; readable by its owner only (Erlang insists).
    printf '%s' "${COOKIE:-compatcookie$AMQP_PORT}" >"$BASE/.erlang.cookie"
    chmod 600 "$BASE/.erlang.cookie"
}

do_start() {
    [ -x "$RMQ_BIN/rabbitmq-server" ] || { log "not installed; run: $0 install"; exit 1; }
    do_stop >/dev/null 2>&1 || true
    if port_open "$AMQP_PORT"; then
        log "port $AMQP_PORT is already in use by something else"; exit 1
    fi
    write_config
    boot
}

# Starts the node on the state directory as it is and waits until it serves.
boot() {
    node_env
    # epmd is shared by all Erlang nodes on the host; start it if nobody has.
    epmd -daemon 2>/dev/null || true
    # exec: no shell stays behind holding our stdout, so `$(rabbitmq.sh start)` and a pipe end.
    (cd "$BASE" && exec setsid "$RMQ_BIN/rabbitmq-server" \
        >"$BASE/log/startup_log" 2>"$BASE/log/startup_err" </dev/null) &
    echo $! >"$BASE/beam.pid"
    log "starting $NODE (pid $(cat "$BASE/beam.pid")), state in $BASE"
    i=0
    until port_open "$AMQP_PORT"; do
        if ! kill -0 "$(cat "$BASE/beam.pid")" 2>/dev/null; then
            log "node exited during start; see $BASE/log"; tail -20 "$BASE/log/startup_log" >&2 || true
            exit 1
        fi
        i=$((i + 1))
        if [ $i -gt $((START_TIMEOUT * 2)) ]; then log "timed out"; do_stop; exit 1; fi
        sleep 0.5
    done
    ctl await_startup >/dev/null
    # Quorum queues, stream queues, at-least-once dead lettering and friends.
    ctl enable_feature_flag all >/dev/null
    log "management on http://127.0.0.1:$MGMT_PORT/"
    echo "amqp://guest:guest@localhost:$AMQP_PORT/"
}

do_kill() {
    [ -d "$BASE" ] || { log "no node state at $BASE"; exit 1; }
    for f in "$BASE/rabbitmq.pid" "$BASE/beam.pid"; do
        [ -f "$f" ] && kill -9 "$(cat "$f")" 2>/dev/null || true
    done
    i=0
    while port_open "$AMQP_PORT" && [ $i -lt 20 ]; do sleep 0.5; i=$((i + 1)); done
    log "killed $NODE (state kept in $BASE)"
}

do_resume() {
    [ -d "$BASE" ] || { log "no node state at $BASE"; exit 1; }
    rm -f "$BASE/rabbitmq.pid"
    boot
}

do_status() {
    node_env
    if port_open "$AMQP_PORT" && [ -d "$BASE" ]; then
        echo "running $NODE amqp://guest:guest@localhost:$AMQP_PORT/"
    else
        echo "not running"; exit 3
    fi
}

# AMQP ports of the cluster's nodes, node 1 (the one the others join) first.
cluster_ports() {
    i=0
    while [ $i -lt "$CLUSTER_SIZE" ]; do echo $((CLUSTER_BASE + i)); i=$((i + 1)); done
}

# Waits until node 1's `cluster_status` lists every node as running.
wait_cluster_running() {
    i=0
    until ctl cluster_status --formatter json 2>/dev/null | python3 -c '
import json, sys
sys.exit(0 if len(json.load(sys.stdin)["running_nodes"]) >= int(sys.argv[1]) else 1)
' "$CLUSTER_SIZE"; do
        i=$((i + 1))
        if [ $i -gt $((START_TIMEOUT * 2)) ]; then log "cluster did not form"; return 1; fi
        sleep 0.5
    done
}

do_cluster_start() {
    COOKIE="compatcluster$CLUSTER_BASE"
    # Boot all nodes at once (each boot is mostly waiting), each as a standalone node first.
    pids=""
    for port in $(cluster_ports); do
        (select_node "$port" $((port + 10000)); do_start >/dev/null) &
        pids="$pids $!"
    done
    failed=0
    for pid in $pids; do wait "$pid" || failed=1; done
    if [ $failed -ne 0 ]; then log "a node failed to start"; do_cluster_stop; exit 1; fi
    seed="compat$CLUSTER_BASE@localhost"
    for port in $(cluster_ports | tail -n +2); do
        select_node "$port" $((port + 10000))
        node_env
        # join_cluster resets the joining node's own (empty) database first.
        ctl stop_app >/dev/null
        ctl join_cluster "$seed" >/dev/null
        ctl start_app >/dev/null
        log "compat$port@localhost joined $seed"
    done
    select_node "$CLUSTER_BASE" $((CLUSTER_BASE + 10000))
    node_env
    wait_cluster_running || { do_cluster_stop; exit 1; }
    ctl enable_feature_flag all >/dev/null
    for port in $(cluster_ports); do echo "amqp://guest:guest@localhost:$port/"; done
}

do_cluster_stop() {
    pids=""
    for port in $(cluster_ports); do
        (select_node "$port" $((port + 10000)); do_stop) &
        pids="$pids $!"
    done
    for pid in $pids; do wait "$pid" || true; done
}

do_cluster() {
    verb=${2:-}
    CLUSTER_SIZE=${3:-3}
    CLUSTER_BASE=${4:-5681}
    [ -x "$RMQ_BIN/rabbitmq-server" ] || { log "not installed; run: $0 install"; exit 1; }
    case "$verb" in
        start) do_cluster_start ;;
        stop) do_cluster_stop ;;
        *) echo "usage: $0 cluster start|stop N BASEPORT" >&2; exit 2 ;;
    esac
}

case "$CMD" in
    install) do_install ;;
    start) select_node "${2:-5673}" "${3:-15673}"; do_start ;;
    stop) select_node "${2:-5673}" "${3:-15673}"; do_stop ;;
    status) select_node "${2:-5673}" "${3:-15673}"; do_status ;;
    kill) select_node "${2:?amqp port}" "${3:-$((${2} + 10000))}"; do_kill ;;
    resume) select_node "${2:?amqp port}" "${3:-$((${2} + 10000))}"; do_resume ;;
    cluster) do_cluster "$@" ;;
    # rabbitmqctl for one node of ours (e.g. `ctl 5682 stop_app`), with its env and cookie
    ctl) select_node "${2:?amqp port}" $((${2} + 10000)); node_env; shift 2; ctl "$@" ;;
    # rabbitmq-plugins for one node (e.g. `plugins 5676 enable rabbitmq_consistent_hash_exchange`)
    plugins) select_node "${2:?amqp port}" $((${2} + 10000)); node_env; shift 2
             "$RMQ_BIN/rabbitmq-plugins" -n "$NODE" "$@" ;;
    queues) select_node "${2:?amqp port}" $((${2} + 10000)); node_env; shift 2
            "$RMQ_BIN/rabbitmq-queues" -n "$NODE" "$@" ;;
    *) echo "usage: $0 install|start|stop|status [amqp_port] [mgmt_port]" >&2
       echo "       $0 cluster start|stop N BASEPORT" >&2
       echo "       $0 ctl AMQP_PORT rabbitmqctl-args..." >&2; exit 2 ;;
esac
