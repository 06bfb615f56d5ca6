"""connection.start/tune/open as clients see them: server properties, capabilities, heartbeat
negotiation, authentication failure and missing vhost."""

import asyncio

import aio_pika
import aiormq.exceptions
import pika
import pika.exceptions
import pytest

from compat_tests.support.raw import RawClient


def test_server_properties_identify_product_and_version(server_info):
    props = server_info.properties
    for key in ("product", "version", "platform", "copyright", "information", "capabilities"):
        assert key in props, key
    assert server_info.product
    assert server_info.version_tuple >= (3,)


@pytest.mark.parametrize("capability", [
    "publisher_confirms", "exchange_exchange_bindings", "basic.nack", "consumer_cancel_notify",
    "connection.blocked", "consumer_priorities", "authentication_failure_close",
    "per_consumer_qos", "direct_reply_to",
])
def test_capability_advertised(server_info, capability):
    assert server_info.capabilities.get(capability) is True


def test_start_offers_plain_and_amqplain_and_en_us(broker_url):
    with RawClient(broker_url) as raw:
        reply = raw.handshake()
        assert reply.name == "Connection.OpenOk"
        mechanisms = raw.start.mechanisms.split()
        assert "PLAIN" in mechanisms and "AMQPLAIN" in mechanisms
        assert "en_US" in raw.start.locales.split()
        assert (raw.start.version_major, raw.start.version_minor) == (0, 9)


def test_tune_proposes_rabbitmq_defaults(broker_url):
    with RawClient(broker_url) as raw:
        raw.handshake()
        assert (raw.tune.channel_max, raw.tune.frame_max, raw.tune.heartbeat) == (2047, 131072, 60)


def test_heartbeat_client_lower_value_wins(pika_connect):
    conn = pika_connect(heartbeat=10)
    assert conn._impl.params.heartbeat == 10


def test_heartbeat_zero_from_client_disables(pika_connect):
    # pika applies its own callable/int: 0 means the client asks for none and the server accepts.
    conn = pika_connect(heartbeat=0)
    assert conn._impl.params.heartbeat == 0


def test_heartbeat_default_is_server_proposal(pika_connect):
    conn = pika_connect()
    assert conn._impl.params.heartbeat == 60


def test_heartbeat_callback_sees_server_proposal(pika_connect):
    seen = []

    def choose(connection, server_value):
        seen.append(server_value)
        return 5

    conn = pika_connect(heartbeat=choose)
    assert seen == [60]
    assert conn._impl.params.heartbeat == 5


def test_wrong_password_pika(pika_params):
    params = pika_params(credentials=pika.PlainCredentials("guest", "wrong-password"))
    with pytest.raises(pika.exceptions.ProbableAuthenticationError) as info:
        pika.BlockingConnection(params)
    assert "ACCESS_REFUSED" in str(info.value)


def test_unknown_user_pika(pika_params):
    params = pika_params(credentials=pika.PlainCredentials("no-such-user", "x"))
    with pytest.raises(pika.exceptions.ProbableAuthenticationError):
        pika.BlockingConnection(params)


def test_wrong_password_raw_gets_403_close(broker_url):
    url = broker_url.replace("guest:guest@", "guest:nope@", 1)
    with RawClient(url) as raw:
        reply = raw.handshake()
        assert reply.name == "Connection.Close"
        assert reply.reply_code == 403
        assert reply.reply_text.startswith("ACCESS_REFUSED - Login was refused using authentication mechanism PLAIN")


def test_wrong_password_aio_pika(broker_url):
    url = broker_url.replace("guest:guest@", "guest:nope@", 1)

    async def main():
        with pytest.raises(aiormq.exceptions.ProbableAuthenticationError):
            await aio_pika.connect(url)

    asyncio.run(asyncio.wait_for(main(), 20))


def test_missing_vhost_pika(pika_params):
    params = pika_params(virtual_host="no-such-vhost")
    # pika wraps the 530 close received during connection.open in ProbableAccessDeniedError.
    with pytest.raises(pika.exceptions.ProbableAccessDeniedError) as info:
        pika.BlockingConnection(params)
    assert "(530) 'NOT_ALLOWED - vhost no-such-vhost not found'" in str(info.value)


def test_missing_vhost_raw(broker_url):
    with RawClient(broker_url) as raw:
        reply = raw.handshake(vhost="no-such-vhost")
        assert reply.name == "Connection.Close"
        assert (reply.reply_code, reply.class_id, reply.method_id) == (530, 10, 40)


def test_missing_vhost_aio_pika(broker_url):
    base = broker_url.rstrip("/")
    url = base[: base.rfind("/")] + "/no-such-vhost" if base.count("/") > 2 else base + "/no-such-vhost"

    async def main():
        # aiormq does not map a close during connection.open to ConnectionNotAllowed; it reports
        # the unexpected Connection.Close frame instead.
        with pytest.raises(aiormq.exceptions.InvalidFrameError) as info:
            await aio_pika.connect(url)
        assert "Connection.Close" in str(info.value)

    asyncio.run(asyncio.wait_for(main(), 20))


def test_client_close_is_clean(pika_connect):
    conn = pika_connect()
    conn.channel()
    conn.close()
    assert conn.is_closed


def test_update_secret_is_answered_and_the_connection_carries_on(broker_url):
    # connection.update-secret (OAuth token refresh): the internal user database accepts the
    # new secret as it is (its credentials never expire) and replies update-secret-ok.
    from pamqp import commands

    with RawClient(broker_url) as raw:
        raw.handshake()
        raw.send(0, commands.Connection.UpdateSecret(new_secret="guest", reason="refresh"))
        assert raw.read_method().name == "Connection.UpdateSecretOk"
        raw.open_channel(1)


@pytest.mark.rabbitmq4
def test_anonymous_mechanism_is_offered_and_logs_in_as_guest_from_loopback(broker_url):
    # RabbitMQ 4.x offers SASL ANONYMOUS (anonymous_login_user = guest by default, and guest is
    # loopback-only); 4.2 lists "PLAIN AMQPLAIN ANONYMOUS".
    with RawClient(broker_url) as raw:
        reply = raw.handshake(mechanism="ANONYMOUS")
        assert "ANONYMOUS" in raw.start.mechanisms.split()
        assert reply.name == "Connection.OpenOk"
        raw.open_channel(1)


def test_anonymous_is_not_offered_by_rabbitmq3(broker_url, server_info):
    if not server_info.is_rabbitmq3:
        pytest.skip("RabbitMQ 3.x only: 4.x offers ANONYMOUS")
    with RawClient(broker_url) as raw:
        raw.handshake()
        # 3.10.8 lists "AMQPLAIN PLAIN", or "PLAIN AMQPLAIN" once it has a TLS listener
        assert sorted(raw.start.mechanisms.split()) == ["AMQPLAIN", "PLAIN"]
