"""The management web UI in headless Chromium against a real broker process: log in, watch a
queue appear and its depth and publish rate move while pika publishes, filter and page queues,
get (with x-death reasons) / move / purge messages, publish to an exchange, close a connection,
create a user, a policy and an operator policy, be refused as a user without the administrator
tag, and set a policy as a policymaker.

The tests of this module share one broker and one browser and run in file order (each leaves
what the next may use: users, queues). Waits poll the page (the UI refreshes every 2 s here,
and the broker samples rates every 500 ms); nothing asserts a duration. The 10,000-queue
page-load figure is printed and appended to `WEBUI_TIMINGS` (if set), never asserted.
"""

from __future__ import annotations

import os
import threading
import time
import re
import urllib.parse

import httpx
import pika
import pytest

pytestmark = pytest.mark.timeout(120)

WAIT = 20.0  # seconds any expected change may take to show


def _by():
    from selenium.webdriver.common.by import By
    return By


def until(driver, check, timeout: float = WAIT, what: str = "condition"):
    """Poll `check(driver)` until it returns something truthy (ignoring stale elements)."""
    from selenium.common.exceptions import (NoSuchElementException,
                                            StaleElementReferenceException)
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            last = check(driver)
            if last:
                return last
        except (NoSuchElementException, StaleElementReferenceException):
            pass
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what} (last: {last!r})")


def el(driver, css: str):
    return until(driver, lambda d: d.find_element(_by().CSS_SELECTOR, css), what=css)


def text_of(driver, css: str) -> str:
    return driver.find_element(_by().CSS_SELECTOR, css).text


def row_names(driver, css: str = "#queues tbody tr") -> list:
    """The rows' data-name attributes, read in one script: the page may redraw its table
    (its periodic refresh) between a find and a read of element handles."""
    return driver.execute_script(
        "return Array.from(document.querySelectorAll(arguments[0]))"
        ".map(r => r.getAttribute('data-name'))", css)


def fill(driver, css: str, value: str) -> None:
    box = el(driver, css)
    box.clear()
    box.send_keys(value)


def goto(driver, broker, fragment: str) -> None:
    driver.get(broker.mgmt_url + "/" + fragment)


def accept_confirm(driver) -> None:
    until(driver, lambda d: d.switch_to.alert, what="confirm dialog").accept()


def login(driver, broker, user: str, password: str) -> None:
    goto(driver, broker, "#/login")
    driver.execute_script("sessionStorage.clear()")
    goto(driver, broker, "#/login")
    fill(driver, "#login-user", user)
    fill(driver, "#login-pass", password)
    el(driver, "#login-submit").click()


def fast_refresh(driver) -> None:
    from selenium.webdriver.support.ui import Select
    Select(el(driver, "#refresh")).select_by_visible_text("2 s")


def q(name: str) -> str:
    return urllib.parse.quote(name, safe="")


@pytest.fixture(scope="module")
def api(web_broker):
    with httpx.Client(base_url=web_broker.mgmt_url + "/api", auth=("guest", "guest"), timeout=30) as c:
        yield c


@pytest.fixture(scope="module")
def amqp(web_broker):
    conn = pika.BlockingConnection(pika.URLParameters(web_broker.url))
    yield conn
    if conn.is_open:
        conn.close()


def test_login_refuses_a_wrong_password_then_shows_the_overview(driver, web_broker):
    login(driver, web_broker, "guest", "not-the-password")
    until(driver, lambda d: "Login failed" in text_of(d, "#login-error"), what="login error")
    login(driver, web_broker, "guest", "guest")
    until(driver, lambda d: text_of(d, "#who-name") == "guest", what="logged in")
    fast_refresh(driver)
    el(driver, "#chart-rates")
    until(driver, lambda d: "running" in text_of(d, "#nodes"), what="node row")
    assert "amqp" in text_of(driver, "#listeners")
    assert el(driver, "#nav-admin").is_displayed()


def test_queue_appears_and_its_depth_and_rates_move_while_pika_publishes(driver, web_broker, amqp):
    goto(driver, web_broker, "#/queues")
    fill(driver, "#qs-filter", r"^web\.q1$")
    el(driver, "#qs-apply").click()
    until(driver, lambda d: "none" in text_of(d, "#queues"), what="no queue yet")
    ch = amqp.channel()
    ch.queue_declare("web.q1")
    row = '#queues tr[data-name="web.q1"]'
    el(driver, row)

    stop = threading.Event()
    published = []

    def publish():
        conn = pika.BlockingConnection(pika.URLParameters(web_broker.url))
        pch = conn.channel()
        while not stop.is_set():
            pch.basic_publish("", "web.q1", b"hello from pika")
            published.append(1)
            conn.sleep(0.02)
        conn.close()

    t = threading.Thread(target=publish, daemon=True)
    t.start()
    try:
        def total(d):
            return int(text_of(d, row + " .q-total").replace(",", "") or 0)
        first = until(driver, total, what="queue depth above zero")
        until(driver, lambda d: total(d) > first, what="queue depth growing")
        until(driver, lambda d: float(text_of(d, row + " .q-publish-rate").rstrip("/s") or 0) > 0,
              what="publish rate above zero")
        goto(driver, web_broker, "#/")
        until(driver, lambda d: float(text_of(d, "#ov-publish-rate").rstrip("/s")) > 0,
              what="overview publish rate above zero")
        until(driver, lambda d: int(text_of(d, "#ov-messages").replace(",", "")) > 0,
              what="overview queued messages")
    finally:
        stop.set()
        t.join(10)
    assert published


def test_filter_and_page_through_queues(driver, web_broker, amqp):
    ch = amqp.channel()
    for i in range(250):
        ch.queue_declare(f"web.page.{i:03d}")
    goto(driver, web_broker, "#/queues")
    fill(driver, "#qs-filter", r"^web\.page\.")
    el(driver, "#qs-apply").click()
    until(driver, lambda d: "Page 1 of 3 (250 matching" in text_of(d, "#qs-page-info"), what="page 1/3")
    names = row_names(driver)
    assert len(names) == 100 and names[0] == "web.page.000"
    el(driver, "#qs-next").click()
    until(driver, lambda d: text_of(d, "#qs-page-info").startswith("Page 2 of 3"), what="page 2")
    el(driver, "#qs-next").click()
    until(driver, lambda d: text_of(d, "#qs-page-info").startswith("Page 3 of 3"), what="page 3")
    names = row_names(driver)
    assert names[0] == "web.page.200" and names[-1] == "web.page.249" and len(names) == 50
    fill(driver, "#qs-filter", r"page\.0[1-2][05]$")
    el(driver, "#qs-apply").click()
    until(driver, lambda d: "(4 matching" in text_of(d, "#qs-page-info"), what="regex filter")
    assert row_names(driver) == ["web.page.010", "web.page.015", "web.page.020", "web.page.025"]


def test_get_messages_shows_dead_letter_reasons(driver, web_broker, amqp, api):
    ch = amqp.channel()
    ch.queue_declare("web.dlq")
    ch.queue_declare("web.src", arguments={"x-dead-letter-exchange": "",
                                           "x-dead-letter-routing-key": "web.dlq"})
    ch.basic_publish("", "web.src", b"rejected one")
    method, _, _ = ch.basic_get("web.src")
    ch.basic_reject(method.delivery_tag, requeue=False)
    until(driver, lambda d: api.get("/queues/%2F/web.dlq").json()["messages"] == 1,
          what="dead letter arrived")
    goto(driver, web_broker, "#/queues/%2F/web.dlq")
    el(driver, "#get-submit").click()  # default ack mode: requeue
    until(driver, lambda d: "rejected one" in text_of(d, "#messages"), what="message payload")
    deaths = text_of(driver, "#messages")
    assert "Dead-lettered (x-death)" in deaths and "rejected" in deaths and "web.src" in deaths
    assert api.get("/queues/%2F/web.dlq").json()["messages"] == 1  # requeued, still there


def test_get_with_ack_then_purge(driver, web_broker, amqp, api):
    ch = amqp.channel()
    ch.queue_declare("web.purge")
    for i in range(3):
        ch.basic_publish("", "web.purge", b"message %d" % i)
    goto(driver, web_broker, "#/queues/%2F/web.purge")
    until(driver, lambda d: "3" in text_of(d, "#q-total"), what="3 messages shown")
    from selenium.webdriver.support.ui import Select
    Select(el(driver, "#get-ackmode")).select_by_value("ack_requeue_false")
    el(driver, "#get-submit").click()
    until(driver, lambda d: "message 0" in text_of(d, "#messages"), what="first message")
    until(driver, lambda d: api.get("/queues/%2F/web.purge").json()["messages"] == 2,
          what="the got message acked away")
    el(driver, "#purge").click()
    accept_confirm(driver)
    until(driver, lambda d: "Queue purged" in text_of(d, "#flash"), what="purge done")
    assert api.get("/queues/%2F/web.purge").json()["messages"] == 0
    until(driver, lambda d: text_of(d, "#q-total").split()[-1] == "0", what="page shows 0")


def test_move_messages_to_another_queue(driver, web_broker, amqp, api):
    ch = amqp.channel()
    ch.queue_declare("web.move.from")
    ch.queue_declare("web.move.to")
    for i in range(5):
        ch.basic_publish("", "web.move.from", b"m%d" % i)
    goto(driver, web_broker, "#/queues/%2F/web.move.from")
    fill(driver, "#move-dest", "web.move.to")
    el(driver, "#move-submit").click()
    until(driver, lambda d: "Moved 5 message(s)" in text_of(d, "#flash"), what="move done")
    assert api.get("/queues/%2F/web.move.to").json()["messages"] == 5
    assert api.get("/queues/%2F/web.move.from").json()["messages"] == 0
    got = api.post("/queues/%2F/web.move.to/get", json={"count": 5, "ackmode": "ack_requeue_false",
                                                        "encoding": "auto"}).json()
    assert [m["payload"] for m in got] == ["m0", "m1", "m2", "m3", "m4"]


def test_publish_to_an_exchange(driver, web_broker, amqp, api):
    amqp.channel().queue_declare("web.pub")
    goto(driver, web_broker, "#/exchanges/%2F/amq.default")
    fill(driver, "#publish-key", "web.pub")
    fill(driver, "#publish-payload", "typed in the browser")
    el(driver, "#publish-submit").click()
    until(driver, lambda d: "published and routed" in text_of(d, "#flash"), what="publish")
    got = api.post("/queues/%2F/web.pub/get", json={"count": 1, "ackmode": "ack_requeue_false",
                                                    "encoding": "auto"}).json()
    assert got[0]["payload"] == "typed in the browser"


def test_close_a_connection(driver, web_broker, api):
    params = pika.URLParameters(web_broker.url)
    params.client_properties = {"connection_name": "web-closer"}
    victim = pika.BlockingConnection(params)
    try:
        goto(driver, web_broker, "#/connections")
        fill(driver, "#conns-filter", "")
        el(driver, "#conns-apply").click()
        link = until(driver, lambda d: [a for a in d.find_elements(_by().CSS_SELECTOR, "#connections a")
                                        if "web-closer" in a.find_element(_by().XPATH, "../..").text],
                     what="the connection listed")
        link[0].click()
        el(driver, "#close-conn").click()
        accept_confirm(driver)
        until(driver, lambda d: d.current_url.endswith("#/connections"), what="back to the list")
        with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as closed:
            deadline = time.monotonic() + WAIT
            while time.monotonic() < deadline:
                victim.process_data_events(0.2)
        assert closed.value.reply_code == 320
    finally:
        if victim.is_open:
            victim.close()
    # the close frame goes out before the connection leaves the node's registry
    deadline = time.monotonic() + WAIT
    while [c for c in api.get("/connections").json()
           if c["client_properties"].get("connection_name") == "web-closer"]:
        assert time.monotonic() < deadline, "the closed connection is still listed"
        time.sleep(0.1)


def test_create_a_user_a_policy_and_an_operator_policy(driver, web_broker, api):
    goto(driver, web_broker, "#/admin")
    fill(driver, "#user-name", "web-monitor")
    fill(driver, "#user-pass", "s3cret")
    fill(driver, "#user-tags", "monitoring")
    el(driver, "#user-submit").click()
    until(driver, lambda d: d.find_elements(_by().CSS_SELECTOR, '#users tr[data-name="web-monitor"]'),
          what="user listed")
    assert api.get("/users/web-monitor").json()["tags"] in (["monitoring"], "monitoring")
    fill(driver, "#policy-name", "web-limit")
    fill(driver, "#policy-pattern", r"^web\.limited$")
    fill(driver, "#policy-definition", '{"max-length": 2}')
    el(driver, "#policy-submit").click()
    until(driver, lambda d: d.find_elements(_by().CSS_SELECTOR, '#policies tr[data-name="web-limit"]'),
          what="policy listed")
    policy = api.get("/policies/%2F/web-limit").json()
    assert policy["pattern"] == r"^web\.limited$" and policy["definition"] == {"max-length": 2}
    assert api.put("/queues/%2F/web.limited", json={}).status_code == 201
    until(driver, lambda d: api.get("/queues/%2F/web.limited").json().get("policy") == "web-limit",
          what="policy applied")
    fill(driver, "#oppolicy-name", "web-cap")
    fill(driver, "#oppolicy-pattern", r"^web\.limited$")
    fill(driver, "#oppolicy-definition", '{"max-length": 1}')
    el(driver, "#oppolicy-submit").click()
    until(driver, lambda d: d.find_elements(_by().CSS_SELECTOR,
                                            '#operator-policies tr[data-name="web-cap"]'),
          what="operator policy listed")
    until(driver, lambda d: api.get("/queues/%2F/web.limited").json().get("operator_policy")
          == "web-cap", what="operator policy applied")
    assert api.get("/queues/%2F/web.limited").json()["effective_policy_definition"] == {"max-length": 1}


def test_a_monitoring_user_sees_but_is_refused_admin_and_delete(driver, web_broker, api):
    assert api.get("/users/web-monitor").status_code == 200  # made by the test before
    login(driver, web_broker, "web-monitor", "s3cret")
    until(driver, lambda d: text_of(d, "#who-name") == "web-monitor", what="logged in")
    assert not el(driver, "#nav-admin").is_displayed()
    el(driver, "#chart-rates")  # monitoring users see the overview
    goto(driver, web_broker, "#/admin")
    until(driver, lambda d: "Refused: Not administrator user" in text_of(d, "#page-error"),
          what="admin refused")
    goto(driver, web_broker, "#/queues/%2F/web.q1")
    el(driver, "#delete").click()
    accept_confirm(driver)
    until(driver, lambda d: "Refused:" in text_of(d, "#flash"), what="delete refused")
    assert api.get("/queues/%2F/web.q1").status_code == 200
    login(driver, web_broker, "guest", "guest")  # leave the browser as the admin


def test_a_policymaker_gets_the_policies_part_of_admin(driver, web_broker, api):
    assert api.put("/users/web-pm", json={"password": "pm", "tags": "policymaker"}).status_code == 201
    assert api.put("/permissions/%2F/web-pm", json={"configure": ".*", "write": ".*",
                                                    "read": ".*"}).status_code == 201
    login(driver, web_broker, "web-pm", "pm")
    until(driver, lambda d: text_of(d, "#who-name") == "web-pm", what="logged in")
    el(driver, "#nav-admin").click()
    el(driver, "#policy-form")
    assert not driver.find_elements(_by().CSS_SELECTOR, "#user-form, #oppolicy-form, #defs-import")
    fill(driver, "#policy-name", "web-pm-policy")
    fill(driver, "#policy-pattern", r"^web\.pm$")
    el(driver, "#policy-submit").click()
    until(driver, lambda d: d.find_elements(_by().CSS_SELECTOR, '#policies tr[data-name="web-pm-policy"]'),
          what="policy listed")
    assert api.get("/policies/%2F/web-pm-policy").status_code == 200
    login(driver, web_broker, "guest", "guest")


def test_page_load_with_10000_queues(driver, web_broker, amqp):
    """A figure, not a check: how long the queues page takes to show its first 100 rows of
    10,000 (WEBUI_QUEUE_COUNT to change), and one more page after a filter."""
    count = int(os.environ.get("WEBUI_QUEUE_COUNT", "10000"))
    ch = amqp.channel()
    for i in range(count):
        ch.queue_declare(f"load.{i:05d}", durable=False, auto_delete=False)
    login(driver, web_broker, "guest", "guest")
    until(driver, lambda d: text_of(d, "#who-name") == "guest", what="logged in")
    driver.get("about:blank")  # a full page load, as a user opening the page (login is kept)
    start = time.monotonic()
    goto(driver, web_broker, "#/queues")
    until(driver, lambda d: len(d.find_elements(_by().CSS_SELECTOR, "#queues tbody tr[data-name]")) >= 100,
          timeout=60, what="first page of queues")
    first_page = time.monotonic() - start
    start = time.monotonic()
    fill(driver, "#qs-filter", r"^load\.09")
    el(driver, "#qs-apply").click()
    until(driver, lambda d: "(1,000 matching" in text_of(d, "#qs-page-info") or
          f"({min(count, 1000):,} matching" in text_of(d, "#qs-page-info"), timeout=60, what="filtered page")
    filtered = time.monotonic() - start
    start = time.monotonic()
    goto(driver, web_broker, "#/")
    until(driver, lambda d: text_of(d, "#ov-queues").replace(",", "").isdigit()
          and int(text_of(d, "#ov-queues").replace(",", "")) >= count, timeout=60, what="overview")
    overview = time.monotonic() - start
    line = (f"webui page load with {count} queues: queues page {first_page:.2f} s, filtered page "
            f"{filtered:.2f} s, overview {overview:.2f} s")
    print("\n" + line)
    out = os.environ.get("WEBUI_TIMINGS")
    if out:
        with open(out, "a") as f:
            f.write(line + "\n")
    for i in range(count):
        ch.queue_delete(f"load.{i:05d}")


def test_page_load_with_1000_connections(driver, web_broker):
    """A figure, not a check: how long the connections page takes to show its first page and
    the count of 1,000 open connections (WEBUI_CONNECTION_COUNT to change)."""
    import pika

    count = int(os.environ.get("WEBUI_CONNECTION_COUNT", "1000"))
    params = pika.URLParameters(web_broker.url + "?heartbeat=0")
    conns = [pika.BlockingConnection(params) for _ in range(count)]
    try:
        login(driver, web_broker, "guest", "guest")
        until(driver, lambda d: text_of(d, "#who-name") == "guest", what="logged in")
        driver.get("about:blank")
        start = time.monotonic()
        goto(driver, web_broker, "#/connections")
        def shown(d) -> bool:  # the other tests' connections may be open too: at least count
            m = re.search(r"([\d,]+) in all", text_of(d, "#conns-page-info"))
            return bool(m and int(m.group(1).replace(",", "")) >= count
                        and d.find_elements(_by().CSS_SELECTOR, "#connections tbody tr[data-name]"))

        until(driver, shown, timeout=60, what="first page of connections")
        first_page = time.monotonic() - start
        line = f"webui page load with {count} connections: connections page {first_page:.2f} s"
        print("\n" + line)
        out = os.environ.get("WEBUI_TIMINGS")
        if out:
            with open(out, "a") as f:
                f.write(line + "\n")
    finally:
        for c in conns:
            c.close()
