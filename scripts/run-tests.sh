#!/usr/bin/env bash
# The whole test suite, as the README and CI run it.
#  1. unit, property, simulation and integration tests, plus compat_tests against this broker
#     (compat_tests/conftest.py starts `amqp-broker` on a free port);
#     In the background at the same time:
#  2. compat_tests (and the Spark source/sink tests) again against a real RabbitMQ 3.10 on port
#     5673 (AMQPS on 5693, management over HTTPS on 15693, for test_tls.py), to prove every
#     expectation is RabbitMQ's behaviour (skipped with a message when rabbitmq-server is not installed;
#     set SKIP_RABBITMQ=1 to skip on purpose); then compat_tests/test_cluster.py against a
#     3-node RabbitMQ 3.10 cluster on ports 5684-5686 (.ci/rabbitmq.sh cluster).
set -uo pipefail
cd "$(dirname "$0")/.."

status=0

# Stages 2-4, against RabbitMQ. They run in the background beside stage 1 (their output is
# printed after it): most of either's time is spent waiting on brokers and timers, so the two
# together take little longer than stage 1 alone.
rabbitmq_stages() {
  local rc=0
  if [ "${SKIP_RABBITMQ:-0}" = "1" ]; then
    return 0
  fi
  if ! command -v rabbitmq-server >/dev/null 2>&1 && [ ! -x /usr/sbin/rabbitmq-server ]; then
    echo "rabbitmq-server not installed: compat run against RabbitMQ skipped (bash .ci/rabbitmq.sh install)"
    return 0
  fi
  # with AMQPS on 5693 and HTTPS management on 15693, certificates made now (trustme), for
  # compat_tests/test_tls.py
  local tls_dir
  tls_dir=$(mktemp -d)
  python3 -m compat_tests.support.tls "$tls_dir" 127.0.0.1:5693 15693 >"$tls_dir/tls.conf"
  if ! RMQ_EXTRA_CONF="$tls_dir/tls.conf" bash .ci/rabbitmq.sh start; then
    echo "could not start RabbitMQ for the compat run" >&2
    return 1
  fi
  COMPAT_TLS_DIR="$tls_dir" COMPAT_TLS_PORT=5693 COMPAT_TLS_MGMT_PORT=15693 \
  MGMT_URL=http://127.0.0.1:15673 python3 -m pytest compat_tests -q -p no:cacheprovider \
    --basetemp="$tmp_root/rabbitmq" --broker-url amqp://guest:guest@127.0.0.1:5673/ "$@" || rc=$?
  # the Spark source and sink speak plain AMQP 0-9-1: same tests against RabbitMQ
  # (the crash/restart cases, marked slow, run against this broker only)
  SPARK_BROKER_URL=amqp://guest:guest@127.0.0.1:5673/%2F MGMT_URL=http://127.0.0.1:15673 \
    python3 -m pytest tests/spark --basetemp="$tmp_root/rabbitmq-spark" \
    -q -p no:cacheprovider -m "not slow" "$@" || rc=$?
  bash .ci/rabbitmq.sh stop || true
  # what clients of a cluster see: the same tests against a 3-node RabbitMQ 3.10 cluster
  COMPAT_RABBIT_CLUSTER=5684 python3 -m pytest compat_tests/test_cluster.py -q \
    --basetemp="$tmp_root/rabbitmq-cluster" -p no:cacheprovider "$@" || rc=$?
  return $rc
}

tmp_root=$(mktemp -d)
rabbitmq_stages "$@" >"$tmp_root/rabbitmq.log" 2>&1 &
rabbitmq_pid=$!

# 1. against this broker
python3 -m pytest tests compat_tests -q -p no:cacheprovider --basetemp="$tmp_root/ours" "$@" \
  || status=$?

rabbitmq_status=0
wait "$rabbitmq_pid" || rabbitmq_status=$?
echo "--- against RabbitMQ 3.10 (run alongside) ---"
cat "$tmp_root/rabbitmq.log"
[ "$rabbitmq_status" = 0 ] || status=$rabbitmq_status
exit $status
