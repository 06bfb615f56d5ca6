#!/usr/bin/env bash
# The README's first command on a fresh machine, checked: install the project alone (no extras)
# into a new virtual environment, import every module the broker ships, start `amqp-broker` from
# that environment with its defaults (AMQP 5672, management 15672, data dir under $HOME), and do
# a round trip through it. A runtime import that only an extra brings fails here.
#
# Called by .ci/run before the test suite. The round-trip client (pika) is the outer
# interpreter's (`python3`, from the test extra): the check is about what the broker's own
# environment holds, not the client's.
#
#   scripts/fresh-install-check.sh        needs AMQP port 5672 and management port 15672 free
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/fresh-install.XXXXXX")
broker_pid=""

cleanup() {
    if [ -n "$broker_pid" ] && kill -0 "$broker_pid" 2>/dev/null; then
        kill -TERM "$broker_pid" 2>/dev/null || true
        for _ in $(seq 50); do kill -0 "$broker_pid" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$broker_pid" 2>/dev/null || true
    fi
    rm -rf "$work"
}
trap cleanup EXIT

say() { echo "fresh-install-check: $*" >&2; }

say "installing the project alone into a new virtual environment"
python3 -m venv "$work/venv"
# from a copy of the tree, so no build/ directory is left in (or reused from) the checkout
mkdir "$work/src"
tar -C "$root" --exclude=./.git --exclude=./build --exclude='*.egg-info' --exclude=__pycache__ \
    -cf - . | tar -C "$work/src" -xf -
if ! "$work/venv/bin/python" -m pip install -q --disable-pip-version-check "$work/src" \
        >"$work/pip.log" 2>&1; then
    cat "$work/pip.log" >&2
    exit 1
fi

# Every shipped module must import from the bare install, not only the ones start-up touches.
# amqp_broker.spark is the `spark` extra's (PySpark), so it is the one package left out
# (and `__main__`, which runs the broker).
say "importing every module of amqp_broker, quorum and dlx (amqp_broker.spark excepted)"
(cd "$work" && "$work/venv/bin/python" - <<'EOF'
import importlib, pkgutil, sys
failed = []
for top in ("amqp_broker", "quorum", "dlx"):
    pkg = importlib.import_module(top)
    for mod in pkgutil.walk_packages(pkg.__path__, top + "."):
        if mod.name.startswith("amqp_broker.spark") or mod.name.endswith(".__main__"):
            continue  # the spark extra's; __main__ would run the broker
        try:
            importlib.import_module(mod.name)
        except Exception as exc:  # report them all, then fail
            failed.append(f"{mod.name}: {type(exc).__name__}: {exc}")
if failed:
    print("modules that do not import from a bare install:", *failed, sep="\n  ", file=sys.stderr)
    sys.exit(1)
EOF
)

say "starting amqp-broker with its defaults"
mkdir -p "$work/home"
HOME="$work/home" "$work/venv/bin/amqp-broker" >"$work/broker.log" 2>&1 &
broker_pid=$!

if ! python3 - "$broker_pid" <<'EOF'
import os, socket, sys, time
pid = int(sys.argv[1])
deadline = time.monotonic() + 60
while time.monotonic() < deadline:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        sys.exit("amqp-broker exited before listening")
    try:
        for port in (5672, 15672):
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
        sys.exit(0)
    except OSError:
        time.sleep(0.2)
sys.exit("amqp-broker did not listen on 5672 and 15672 within 60 s")
EOF
then
    say "broker log:"; tail -n 40 "$work/broker.log" >&2
    exit 1
fi

say "round trip: declare, publish with confirms, get, ack (pika on 5672)"
python3 - <<'EOF'
import pika
conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", 5672))
ch = conn.channel()
ch.confirm_delivery()
ch.queue_declare("fresh-install-check", durable=True)
ch.basic_publish("", "fresh-install-check", b"hello from a fresh install",
                 pika.BasicProperties(delivery_mode=2), mandatory=True)
method, _props, body = ch.basic_get("fresh-install-check")
assert method is not None and body == b"hello from a fresh install", (method, body)
ch.basic_ack(method.delivery_tag)
ch.queue_delete("fresh-install-check")
conn.close()
EOF

say "the CLIs from the same environment, against the management API on 15672"
"$work/venv/bin/amqp-brokerctl" list_queues name messages >/dev/null
"$work/venv/bin/amqp-broker-queues" check_if_node_is_quorum_critical >/dev/null
"$work/venv/bin/amqp-broker-cluster" --help >/dev/null

say "ok"
