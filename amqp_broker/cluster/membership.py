"""How a node asks a cluster to take it in or let it go (`amqp-brokerctl join_cluster`, `reset`).

The asking node's application is stopped, so it has no links: it asks one node of the cluster
one question over `quorum.transport.ask` (proving the cookie), and that node's server answers
(`server/membership.py`): it records the change in the metadata group and, once committed,
answers with the cluster's node list. The question and answer are encoded here.
"""

from __future__ import annotations

from typing import Any

import msgspec

from quorum.transport import AuthError, ask

__all__ = ["Join", "Leave", "Answer", "encode", "decode", "decode_answer", "ask_cluster",
           "MembershipError"]


class _Msg(msgspec.Struct, array_like=True, frozen=True, tag=True):
    pass


class Join(_Msg, tag="join"):
    """Take `node`, dialled at host:port, into the cluster."""
    node: str
    host: str
    port: int


class Leave(_Msg, tag="leave"):
    """Forget `node` (which asks for itself: it is being reset)."""
    node: str


class Answer(_Msg, tag="ans"):
    ok: bool
    reason: str = ""
    nodes: dict[str, tuple[str, int]] = {}  # every node of the cluster -> where it is dialled


class MembershipError(Exception):
    """The cluster refused, or could not be asked; the text says why."""


encode = msgspec.msgpack.Encoder().encode
decode = msgspec.msgpack.Decoder(Join | Leave).decode
decode_answer = msgspec.msgpack.Decoder(Answer).decode


async def ask_cluster(me: str, cookie: bytes, target: str, addr: tuple[str, int],
                      question: Join | Leave, timeout: float = 30.0, tls: Any = None) -> Answer:
    """Ask node `target` at `addr` (`tls`: the links' (accepting, dialling) contexts); its
    answer, or MembershipError."""
    try:
        raw = await ask(me, target, addr, cookie, encode(question), timeout,
                        tls[1] if tls is not None else None)
    except AuthError as err:
        raise MembershipError(f"node {target} at {addr[0]}:{addr[1]} refused: {err}") from err
    except OSError as err:
        raise MembershipError(f"could not reach node {target} at {addr[0]}:{addr[1]} "
                              f"({err.strerror or err})") from err
    except Exception as err:  # trio.TooSlowError and the like
        raise MembershipError(f"node {target} at {addr[0]}:{addr[1]} did not answer: "
                              f"{type(err).__name__}") from err
    try:
        answer = decode_answer(raw)
    except msgspec.DecodeError as err:
        raise MembershipError(f"node {target} gave an answer this node does not understand") \
            from err
    if not answer.ok:
        raise MembershipError(answer.reason)
    return answer
