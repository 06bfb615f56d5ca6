"""Session._handle_events handles the events that accept_login()/accept_open() produce from input
buffered while they were pending, in the same turn (not on the next socket read)."""

from types import SimpleNamespace

from pamqp import commands as c

from amqp_broker.core.permissions import Permission, PermissionStore
from amqp_broker.protocol import ProtocolConfig
from amqp_broker.server.output_batch import OutputBatch
from amqp_broker.server.session import Session
from tests.protocol.peer import HEADER, method, parse, start_ok


class _FakeBroker:
    def __init__(self) -> None:
        self.settings = SimpleNamespace(consumer_timeout=None, channel_open_rate=None,
                                        queue_declare_rate=None)
        self.protocol_config = ProtocolConfig()
        self.admin = SimpleNamespace(permissions=PermissionStore([Permission("guest", "/")]))
        self.registered = []
        self.cluster_meta = None  # a lone node
        self.quorum = None  # no quorum runtime (no Raft driver to run passes for)
        self.output_batch = OutputBatch()

    def login_refusal(self, user, password, peer):
        return None if (user, password) == ("guest", "guest") else "invalid credentials"

    def channel_refusal(self, user):
        return None

    def open_vhost(self, user, vhost):
        return SimpleNamespace(name=vhost)

    def register_session(self, session):
        self.registered.append(session)

    def update_clock(self):
        pass

    def run_pending(self):
        pass


def test_pipelined_handshake_is_answered_in_one_turn():
    broker = _FakeBroker()
    session = Session(broker, stream=None, peer=("127.0.0.1", 5555))
    conn = session.conn
    # A client that sends start-ok, tune-ok and open without waiting for the replies.
    conn.feed(HEADER + start_ok() + method(0, c.Connection.TuneOk(2047, 131072, 0)) +
              method(0, c.Connection.Open("/")))
    session._handle_events()
    frames = [f for _, f in parse(conn.data_to_send())]
    assert [type(f) for f in frames] == [c.Connection.Start, c.Connection.Tune, c.Connection.OpenOk]
    assert session.opened and broker.registered == [session]
