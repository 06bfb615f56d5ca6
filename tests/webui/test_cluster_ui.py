"""The web UI of a 3-node cluster (LocalCluster: real `amqp-broker` processes): the overview
lists every node, the queues page names a quorum queue's leader and members, each node's page
lists the queues it leads or follows, and a killed node shows as down, in the overview and
among the queue's members."""

from __future__ import annotations

import pika
import pytest

from compat_tests.support.cluster import LocalCluster

from .test_browser import _by, el, fill, login, text_of, until

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with LocalCluster(tmp_path_factory.mktemp("webui-cluster"), 3,
                      config="collect_statistics_interval = 500\n") as c:  # started
        yield c


class _Node:
    """What `login` / `goto` need of a broker: its management URL."""

    def __init__(self, mgmt_url: str) -> None:
        self.mgmt_url = mgmt_url


def test_nodes_leaders_members_and_a_node_going_down(driver, cluster):
    conn = pika.BlockingConnection(pika.URLParameters(cluster.urls[0]))
    try:
        conn.channel().queue_declare("web.qq", durable=True, arguments={"x-queue-type": "quorum"})
    finally:
        conn.close()
    names = cluster.names
    node0 = _Node(cluster.mgmt_urls[0])
    login(driver, node0, "guest", "guest")
    until(driver, lambda d: text_of(d, "#who-name") == "guest", what="logged in")
    until(driver, lambda d: all(n in text_of(d, "#nodes") for n in names)
          and text_of(d, "#nodes").count("running") == 3, what="three running nodes")

    driver.get(node0.mgmt_url + "/#/queues")
    fill(driver, "#qs-filter", r"^web\.qq$")
    el(driver, "#qs-apply").click()
    cells = until(driver, lambda d: [td.text for td in d.find_elements(
        _by().CSS_SELECTOR, '#queues tr[data-name="web.qq"] td')], what="the quorum queue listed")
    assert cells[2] == "quorum"
    leader = cells[4]
    assert leader in names and all(n in cells[5] for n in names)

    follower = next(n for n in names if n != leader)
    driver.get(node0.mgmt_url + "/#/nodes/" + follower)
    until(driver, lambda d: d.find_elements(_by().CSS_SELECTOR, '#node-follows tr[data-name="web.qq"]'),
          what="the queue among the follower's")
    driver.get(node0.mgmt_url + "/#/nodes/" + leader)
    until(driver, lambda d: d.find_elements(_by().CSS_SELECTOR, '#node-led tr[data-name="web.qq"]'),
          what="the queue among the leader's")

    victim = next(i for i, n in enumerate(names) if n not in (leader,) and i != 0)
    cluster.kill(victim)
    driver.get(node0.mgmt_url + "/#/")
    until(driver, lambda d: "down" in text_of(d, "#nodes"), timeout=40, what="a node shown down")
    driver.get(node0.mgmt_url + "/#/queues/%2F/web.qq")
    until(driver, lambda d: f"{names[victim]} (down)" in text_of(d, "#q-members"), timeout=40,
          what="the killed member shown down")
