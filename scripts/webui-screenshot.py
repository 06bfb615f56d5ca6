#!/usr/bin/env python3
"""Take the README's screenshot of the management UI's overview under load.

Starts an `amqp-broker` (compat_tests/support/launcher.py, rates sampled every second), runs
pika publishers and consumers on a few classic and quorum queues (some messages rejected into a
dead-letter queue) for SECONDS (default 60), then saves the overview page from headless
Chromium (needs `chromium`, `chromium-driver` and selenium, as tests/webui) to
docs/images/overview-under-load.png, or to the path given.

    PYTHONPATH=. python3 scripts/webui-screenshot.py [out.png] [--seconds 60]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
from pathlib import Path

import pika

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from compat_tests.support.launcher import Broker  # noqa: E402
from tests.webui.conftest import _FLAGS, CHROMEDRIVER, CHROMIUM  # noqa: E402


def publisher(url: str, queue: str, stop: threading.Event, pause: float) -> None:
    conn = pika.BlockingConnection(pika.URLParameters(url))
    ch = conn.channel()
    while not stop.is_set():
        ch.basic_publish("", queue, b"x" * 256)
        conn.sleep(pause)
    conn.close()


def consumer(url: str, queue: str, stop: threading.Event, reject_every: int) -> None:
    conn = pika.BlockingConnection(pika.URLParameters(url))
    ch = conn.channel()
    ch.basic_qos(prefetch_count=50)
    seen = 0
    for method, _props, _body in ch.consume(queue, inactivity_timeout=0.2):
        if stop.is_set():
            break
        if method is None:
            continue
        seen += 1
        if reject_every and seen % reject_every == 0:
            ch.basic_reject(method.delivery_tag, requeue=False)
        else:
            ch.basic_ack(method.delivery_tag)
    conn.close()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out", nargs="?", default=str(ROOT / "docs/images/overview-under-load.png"))
    ap.add_argument("--seconds", type=float, default=60)
    args = ap.parse_args()
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    with Broker(Path(tempfile.mkdtemp()), config="collect_statistics_interval = 1000\n").start() as b:
        setup = pika.BlockingConnection(pika.URLParameters(b.url)).channel()
        setup.queue_declare("orders.dlq")
        queues = {"orders": {"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "orders.dlq"},
                  "invoices": {"x-queue-type": "quorum"}, "events": {}}
        for name, qargs in queues.items():
            setup.queue_declare(name, durable=True, arguments=qargs)
        stop = threading.Event()
        threads = [threading.Thread(target=publisher, args=(b.url, q, stop, p), daemon=True)
                   for q, p in (("orders", 0.002), ("invoices", 0.01), ("events", 0.004))]
        threads += [threading.Thread(target=consumer, args=(b.url, q, stop, r), daemon=True)
                    for q, r in (("orders", 20), ("invoices", 0))]
        for t in threads:
            t.start()
        time.sleep(args.seconds)
        opts = webdriver.ChromeOptions()
        opts.binary_location = CHROMIUM
        for flag in _FLAGS:
            opts.add_argument(flag)
        opts.add_argument(f"--user-data-dir={tempfile.mkdtemp()}")
        d = webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)
        try:
            d.set_window_size(1300, 1250)
            d.get(b.mgmt_url + "/#/login")
            d.find_element("id", "login-user").send_keys("guest")
            d.find_element("id", "login-pass").send_keys("guest")
            d.find_element("id", "login-submit").click()
            time.sleep(3)
            d.save_screenshot(args.out)
        finally:
            d.quit()
            stop.set()
            for t in threads:
                t.join(5)
    print(args.out)


if __name__ == "__main__":
    main()
