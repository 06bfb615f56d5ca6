"""Continuous membership reconciliation (seed 000) on a 4-node cluster of real processes: a
quorum queue below its target size grows onto running nodes; a member whose node stays
unreachable is replaced by a node that is not a member (our extension); a forgotten node's
memberships go (auto_remove)."""

from __future__ import annotations

from compat_tests.support.cluster import LocalCluster

from .conftest import wait_until
from .test_membership import ctl, publish
from .test_quorum_membership import members

CONFIG = """
quorum_queue.continuous_membership_reconciliation.enabled = true
quorum_queue.continuous_membership_reconciliation.target_group_size = 3
quorum_queue.continuous_membership_reconciliation.auto_remove = true
quorum_queue.continuous_membership_reconciliation.trigger_interval = 500
quorum_queue.continuous_membership_reconciliation.replace_unreachable_after = 4000
"""


def test_queues_grow_to_their_target_and_unreachable_members_are_replaced(tmp_path):
    with LocalCluster(tmp_path / "c", 4, config=CONFIG) as cluster:
        urls, mgmt, names = cluster.urls, cluster.mgmt_urls, cluster.names
        publish(urls[0], "qt", [b"x"], {"x-queue-type": "quorum",
                                        "x-quorum-initial-group-size": 1})
        publish(urls[0], "qa", [b"y"], {"x-queue-type": "quorum",
                                        "x-quorum-initial-group-size": 1,
                                        "x-quorum-target-group-size": 4})
        wait_until(lambda: len(members(mgmt[0], "qt")) == 3, 20, "qt grown to 3 members")
        wait_until(lambda: members(mgmt[0], "qa") == names, 20, "qa grown to 4 members")

        victim = next(n for n in members(mgmt[0], "qt") if n != names[0])
        spare = next(n for n in names if n not in members(mgmt[0], "qt"))
        k = names.index(victim)
        cluster.kill(k)
        # unreachable for 3 s: replaced by the node that was not a member; qa has no spare
        wait_until(lambda: victim not in members(mgmt[0], "qt"), 30, f"{victim} replaced")
        assert spare in members(mgmt[0], "qt") and len(members(mgmt[0], "qt")) == 3
        # the victim comes back (a spare now); another member is killed and forgotten at once:
        # the group is back at its target with the spare, before any outage counts as long
        cluster.restart(k)
        second = next(n for n in members(mgmt[0], "qt") if n != names[0])
        cluster.kill(names.index(second))
        wait_until(lambda: ctl(mgmt[0], "forget_cluster_node", second).returncode == 0, 15,
                   f"{second} forgotten")
        wait_until(lambda: members(mgmt[0], "qt") == sorted(n for n in names if n != second),
                   30, "qt back to 3 members without the forgotten node")
        assert members(mgmt[0], "qa") == sorted(n for n in names if n != second)
