"""pika's callback-style SelectConnection, as long-running consumers use it: the on_open /
on_channel_open / on_close callbacks fire with the broker's reply codes, and consume + ack works
without the blocking adapter.  Each test drives its own ioloop with a safety deadline."""

import pika
import pika.exceptions


class _Driver:
    """Runs one SelectConnection until `done()` is called or the deadline passes."""

    def __init__(self, params, timeout: float = 15.0) -> None:
        self.events: list = []
        self.conn = pika.SelectConnection(params, on_open_callback=self._opened,
                                          on_open_error_callback=self._open_failed,
                                          on_close_callback=self._closed)
        self.conn.ioloop.call_later(timeout, self._timeout)
        self.on_open = None

    def _opened(self, conn):
        self.events.append("open")
        if self.on_open:
            self.on_open(conn)

    def _open_failed(self, conn, err):
        self.events.append(("open-error", err))
        conn.ioloop.stop()

    def _closed(self, conn, reason):
        self.events.append(("closed", reason))
        conn.ioloop.stop()

    def _timeout(self):
        self.events.append("timeout")
        self.done()

    def done(self):
        if self.conn.is_open:
            self.conn.close()
        else:
            self.conn.ioloop.stop()

    def run(self):
        self.conn.ioloop.start()
        return self.events


def test_select_connection_consume_and_ack(pika_params, names):
    q = names.queue()
    d = _Driver(pika_params())
    got, confirms = [], []

    def on_open(conn):
        conn.channel(on_open_callback=on_channel)

    def on_channel(ch):
        ch.queue_declare(q, callback=lambda _: on_declared(ch))

    def on_declared(ch):
        ch.confirm_delivery(ack_nack_callback=on_confirm)
        ch.basic_consume(q, lambda c, m, p, body: on_message(c, m, body))
        ch.basic_publish("", q, b"select")

    def on_confirm(frame):
        confirms.append((frame.method.NAME, frame.method.delivery_tag))
        finish_when_both()

    def on_message(ch, method, body):
        got.append((body, method.delivery_tag, method.redelivered))
        ch.basic_ack(method.delivery_tag)
        finish_when_both()

    def finish_when_both():
        if got and confirms:
            d.done()

    d.on_open = on_open
    events = d.run()
    assert "timeout" not in events
    assert got == [(b"select", 1, False)]
    assert confirms == [("Basic.Ack", 1)]


def test_select_channel_close_callback_gets_reply(pika_params, names):
    d = _Driver(pika_params())
    reasons = []

    def on_open(conn):
        conn.channel(on_open_callback=on_channel)

    def on_channel(ch):
        ch.add_on_close_callback(lambda c, reason: (reasons.append(reason), d.done()))
        ch.queue_declare(names.queue(), passive=True)

    d.on_open = on_open
    events = d.run()
    assert "timeout" not in events
    (reason,) = reasons
    assert isinstance(reason, pika.exceptions.ChannelClosedByBroker)
    assert reason.reply_code == 404 and reason.reply_text.startswith("NOT_FOUND - no queue")


def test_select_connection_close_callback_on_hard_error(pika_params):
    d = _Driver(pika_params())

    def on_open(conn):
        conn.channel(on_open_callback=lambda ch: ch.basic_qos(prefetch_size=1, prefetch_count=1))

    d.on_open = on_open
    events = d.run()
    closed = [e for e in events if isinstance(e, tuple) and e[0] == "closed"]
    (_, reason), = closed
    assert isinstance(reason, pika.exceptions.ConnectionClosedByBroker)
    assert reason.reply_code == 540


def test_select_connection_wrong_password_calls_open_error(pika_params):
    d = _Driver(pika_params(credentials=pika.PlainCredentials("guest", "bad")))
    events = d.run()
    errors = [e[1] for e in events if isinstance(e, tuple) and e[0] == "open-error"]
    assert len(errors) == 1
    assert isinstance(errors[0], pika.exceptions.ProbableAuthenticationError)
