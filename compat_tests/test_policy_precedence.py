"""Which wins when a queue argument and a policy both set a key: overflow (the argument on a
classic queue, as rabbit_amqqueue_process's res_arg; the policy on a quorum queue) and
max-length (the lower), observed through publisher confirms on a full queue.

Policies are set with the `api` / `policy` fixtures of `conftest.py` (skipped without a
management API). Runs against this broker and RabbitMQ 3.10.
"""

import pika.exceptions
import pytest

from compat_tests.support import get_n


def _declare(ch, names, kind, **args):
    q = names.queue()
    if kind == "quorum":
        args["x-queue-type"] = "quorum"
    ch.queue_declare(q, durable=True, arguments=args)
    return q


def _overflow_in_force(ch, q):
    """Publish b"1", b"2", b"3" one by one (each confirmed or nacked) to a queue whose max-length
    is 1 and tell which overflow acted: "drop-head" (none nacked, only b"3" left) or
    "reject-publish" (b"3" nacked, nothing dropped). A quorum queue refuses publishes only once
    it is over the limit (rabbit_fifo's is_over_limit), so it may take b"2" as well."""
    nacked = []
    for body in (b"1", b"2", b"3"):
        try:
            ch.basic_publish("", q, body)
        except pika.exceptions.NackError:
            nacked.append(body)
    count = ch.queue_declare(q, passive=True).method.message_count
    left = [b for _, _, b in get_n(ch, q, count)]
    if not nacked and left == [b"3"]:
        return "drop-head"
    if b"3" in nacked and left == [b"1", b"2"][:3 - len(nacked)]:
        return "reject-publish"
    return f"nacked {nacked}, left {left}"


@pytest.mark.parametrize("kind,arg,pol,wins", [
    ("classic", "reject-publish", "drop-head", "reject-publish"),  # the argument
    ("classic", "drop-head", "reject-publish", "drop-head"),
    ("quorum", "reject-publish", "drop-head", "drop-head"),        # the policy
    ("quorum", "drop-head", "reject-publish", "reject-publish"),
])
def test_overflow_argument_against_policy(confirm_ch, names, policy, kind, arg, pol, wins):
    q = _declare(confirm_ch, names, kind, **{"x-max-length": 1, "x-overflow": arg})
    policy({"overflow": pol}, q)
    assert _overflow_in_force(confirm_ch, q) == wins


@pytest.mark.parametrize("kind", ["classic", "quorum"])
def test_overflow_from_policy_alone(confirm_ch, names, policy, kind):
    q = _declare(confirm_ch, names, kind, **{"x-max-length": 1})
    policy({"overflow": "reject-publish"}, q)
    assert _overflow_in_force(confirm_ch, q) == "reject-publish"


@pytest.mark.parametrize("kind", ["classic", "quorum"])
@pytest.mark.parametrize("arg_len,pol_len", [(1, 5), (5, 1)])
def test_lower_max_length_wins(confirm_ch, names, policy, kind, arg_len, pol_len):
    q = _declare(confirm_ch, names, kind, **{"x-max-length": arg_len, "x-overflow": "reject-publish"})
    policy({"max-length": pol_len}, q)
    assert _overflow_in_force(confirm_ch, q) == "reject-publish"
