"""What TLS costs: the same load over AMQP and over AMQPS against one broker, one run.

One pika publisher sends N messages of S bytes (no confirms) to a classic queue, then one
consumer drains it with prefetch 500 and multiple acks; msg/s for each half, plain and TLS.
Certificates are made on the spot (trustme). Numbers are only comparable within a run.

Usage:  python bench/tls_bench.py [--count 20000] [--size 1024]
"""

from __future__ import annotations

import argparse
import re
import ssl
import sys
import tempfile
import time
from pathlib import Path

import pika
import trustme

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from compat_tests.support.launcher import Broker  # noqa: E402


def _run(params: pika.ConnectionParameters, queue: str, count: int, size: int) -> tuple[float, float]:
    conn = pika.BlockingConnection(params)
    ch = conn.channel()
    ch.queue_declare(queue, auto_delete=False)
    body = b"x" * size
    start = time.perf_counter()
    for _ in range(count):
        ch.basic_publish("", queue, body)
    while ch.queue_declare(queue, passive=True).method.message_count < count:
        conn.sleep(0.01)
    published = time.perf_counter() - start
    ch.basic_qos(prefetch_count=500)
    got = 0
    start = time.perf_counter()
    for method, _, _ in ch.consume(queue):
        got += 1
        if got % 250 == 0 or got == count:
            ch.basic_ack(method.delivery_tag, multiple=True)
        if got == count:
            break
    consumed = time.perf_counter() - start
    ch.cancel()
    ch.queue_delete(queue)
    conn.close()
    return count / published, count / consumed


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--count", type=int, default=20000)
    p.add_argument("--size", type=int, default=1024)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        where = Path(tmp)
        ca = trustme.CA()
        cert = ca.issue_cert("localhost", "127.0.0.1")
        ca.cert_pem.write_to_path(str(where / "ca.pem"))
        cert.cert_chain_pems[0].write_to_path(str(where / "cert.pem"))
        cert.private_key_pem.write_to_path(str(where / "key.pem"))
        config = (f"listeners.ssl.default = 127.0.0.1:0\nssl_options.cacertfile = {where}/ca.pem\n"
                  f"ssl_options.certfile = {where}/cert.pem\nssl_options.keyfile = {where}/key.pem\n")
        with Broker(where / "broker", management=False, config=config) as broker:
            tls_port = int(re.search(r"over TLS listening on \S+:(\d+)",
                                     broker.log_path.read_text()).group(1))
            ctx = ssl.create_default_context()
            ca.configure_trust(ctx)
            plain = pika.ConnectionParameters("127.0.0.1", broker.port)
            secure = pika.ConnectionParameters("127.0.0.1", tls_port,
                                               ssl_options=pika.SSLOptions(ctx, "localhost"))
            for name, params in (("amqp", plain), ("amqps", secure)):
                pub, con = _run(params, f"bench.tls.{name}", args.count, args.size)
                print(f"{name:6s} publish {pub:9.0f} msg/s   consume {con:9.0f} msg/s   "
                      f"({args.count} x {args.size} B)")


if __name__ == "__main__":
    main()
