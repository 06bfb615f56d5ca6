"""NodeDriver in one process: three nodes on loopback TCP, each with its own durable log."""

from __future__ import annotations

import os
import random

import pytest
import trio

from compat_tests.support.launcher import free_ports
from quorum.driver import LeadershipLost, NodeDriver
from quorum.log import AsyncLog, LogConfig
from quorum.log.snapshot import parse_checkpoint_name
from quorum.log.store import group_dir_name
from quorum.raft import KvChanged, KvDelete, KvMachine, KvSet, LocalEffect, NotLeader, RaftOptions
from quorum.transport import Transport


pytestmark = pytest.mark.trio

NAMES = ["n1", "n2", "n3"]
SECRET = b"test-cookie"
BASE = RaftOptions(election_tick=10, heartbeat_tick=2)
# the drivers of `start` run with each: the plain Ready loop, and the cluster runtime's choice
# (asynchronous writes, early messages, follower acks)
MODES = {"sync": BASE, "async": RaftOptions(election_tick=10, heartbeat_tick=2,
                                            early_messages=True, follower_acks=True,
                                            async_writes=True)}
_options = BASE


@pytest.fixture(autouse=True, params=list(MODES))
def driver_mode(request):
    global _options
    _options = MODES[request.param]
    yield request.param
    _options = BASE


class Node:
    def __init__(self, name: str, root, ports: dict[str, int], groups: list[str], cfg: LogConfig,
                 snapshot_every: int, machine=KvMachine) -> None:
        self.name = name
        self.log = AsyncLog.open(str(root / name), cfg)
        self.transport = Transport(name, {n: ("127.0.0.1", ports[n]) for n in NAMES}, SECRET,
                                   self._on_frame, listen=("127.0.0.1", ports[name]),
                                   backoff=(0.01, 0.1))
        self.isolated = False
        self.driver = NodeDriver(name, self.log, self, tick_interval=0.01,
                                 options=_options,
                                 snapshot_every=snapshot_every, rng=random.Random(hash(name)))
        self.effects: list = []
        for g in groups:
            self.driver.add_group(g, machine(), NAMES, on_effects=lambda g, effs: self.effects.extend(effs))
        self.cancel = trio.CancelScope()

    def _on_frame(self, peer: str, group: str, data: bytes) -> None:
        if not self.isolated:
            self.driver.deliver(peer, group, data)

    def send(self, peer: str, group: str, data: bytes) -> bool:
        """The driver's sender: the transport, unless the test isolated this node."""
        return False if self.isolated else self.transport.send(peer, group, data)

    async def serve(self, task_status=trio.TASK_STATUS_IGNORED) -> None:
        with self.cancel:
            async with trio.open_nursery() as n:
                await n.start(self.transport.run)
                await n.start(self.driver.run)
                task_status.started()
        self.log.close()


async def wait_leader(nodes: dict[str, Node], group: str) -> str:
    while True:
        leaders = [n for n in nodes.values() if n.driver.status(group).is_leader]
        if len(leaders) == 1:
            return leaders[0].name
        await trio.sleep(0.01)


async def propose_anywhere(nodes: dict[str, Node], group: str, cmd) -> object:
    while True:
        leader = await wait_leader(nodes, group)
        try:
            return await nodes[leader].driver.propose(group, KvMachine.encode(cmd))
        except (NotLeader, LeadershipLost):  # retry: these test commands are idempotent
            await trio.sleep(0.01)


async def start(nursery, tmp_path, groups, cfg=LogConfig(), snapshot_every=4096, ports=None,
                machine=KvMachine):
    ports = ports or dict(zip(NAMES, free_ports(3)))
    nodes = {n: Node(n, tmp_path, ports, groups, cfg, snapshot_every, machine) for n in NAMES}
    for node in nodes.values():
        await nursery.start(node.serve)
    return nodes, ports


async def test_three_nodes_commit_and_apply_everywhere(tmp_path):
    async with trio.open_nursery() as nursery:
        nodes, _ = await start(nursery, tmp_path, ["kv"])
        with trio.fail_after(30):
            assert await propose_anywhere(nodes, "kv", KvSet("a", "1")) is None
            assert await propose_anywhere(nodes, "kv", KvSet("a", "2")) == "1"
            await propose_anywhere(nodes, "kv", KvDelete("a"))
            await propose_anywhere(nodes, "kv", KvSet("b", "x"))
            leader = nodes[await wait_leader(nodes, "kv")]
            while any(n.driver.status("kv").applied < leader.driver.status("kv").applied
                      for n in nodes.values()):
                await trio.sleep(0.01)
        for n in nodes.values():
            assert {k: v[0] for k, v in n.driver.state("kv").items()} == {"b": "x"}
            # KvChanged is a LocalEffect: every replica runs it
            assert [e.key for e in n.effects if isinstance(e, LocalEffect)][-2:] == ["a", "b"]
        nursery.cancel_scope.cancel()


async def test_follower_refuses_with_leader_hint(tmp_path):
    async with trio.open_nursery() as nursery:
        nodes, _ = await start(nursery, tmp_path, ["kv"])
        with trio.fail_after(30):
            leader = await wait_leader(nodes, "kv")
            await propose_anywhere(nodes, "kv", KvSet("k", "v"))
            follower = next(n for n in NAMES if n != leader)
            while nodes[follower].driver.status("kv").leader != leader:
                await trio.sleep(0.01)
            with pytest.raises(NotLeader) as err:
                await nodes[follower].driver.propose("kv", KvMachine.encode(KvSet("x", "y")))
            assert err.value.leader_hint == leader
        nursery.cancel_scope.cancel()


async def test_many_groups_share_one_wal_and_survive_restart(tmp_path):
    groups = [f"q{i}" for i in range(6)]
    cfg = LogConfig(wal_max_size_bytes=16 * 1024, segment_max_entries=32)
    async with trio.open_nursery() as nursery:
        nodes, ports = await start(nursery, tmp_path, groups, cfg, snapshot_every=40)
        with trio.fail_after(60):
            async with trio.open_nursery() as inner:
                for g in groups:
                    async def load(g=g):
                        for i in range(60):
                            await propose_anywhere(nodes, g, KvSet(f"k{i % 7}", f"{g}-{i}"))
                    inner.start_soon(load)
            leader_state = {g: dict(nodes[await wait_leader(nodes, g)].driver.state(g)) for g in groups}
        for n in nodes.values():
            n.cancel.cancel()
        await trio.sleep(0.05)
        nodes, _ = await start(nursery, tmp_path, groups, cfg, snapshot_every=40, ports=ports)
        with trio.fail_after(60):
            for g in groups:
                await propose_anywhere(nodes, g, KvSet("after", "restart"))
                for n in nodes.values():
                    while n.driver.state(g).get("after") is None:
                        await trio.sleep(0.01)
                    state = dict(n.driver.state(g))
                    state.pop("after")
                    assert {k: v[0] for k, v in state.items()} == {k: v[0] for k, v in leader_state[g].items()}
        nursery.cancel_scope.cancel()


async def test_isolated_leader_fails_pending_proposals_as_unknown(tmp_path):
    async with trio.open_nursery() as nursery:
        nodes, _ = await start(nursery, tmp_path, ["kv"])
        with trio.fail_after(30):
            await propose_anywhere(nodes, "kv", KvSet("a", "1"))
            old = nodes[await wait_leader(nodes, "kv")]
            old.isolated = True
            outcome = []

            async def stuck_proposal():
                try:
                    await old.driver.propose("kv", KvMachine.encode(KvSet("lost", "?")))
                    outcome.append("committed")
                except LeadershipLost:
                    outcome.append("unknown")

            nursery.start_soon(stuck_proposal)
            # the others elect a new leader; the old one steps down (check quorum) and must
            # not leave its proposer waiting for an index nobody will commit
            while not outcome:
                await trio.sleep(0.01)
            assert outcome == ["unknown"]
            old.isolated = False
            others = {n: v for n, v in nodes.items() if v is not old}
            await propose_anywhere(others, "kv", KvSet("b", "2"))
        nursery.cancel_scope.cancel()


async def test_linearizable_read_sees_every_earlier_commit(tmp_path):
    async with trio.open_nursery() as nursery:
        nodes, _ = await start(nursery, tmp_path, ["kv"])
        with trio.fail_after(30):
            await propose_anywhere(nodes, "kv", KvSet("k", "1"))
            leader = nodes[await wait_leader(nodes, "kv")]
            await leader.driver.wait_linearizable("kv")
            assert leader.driver.state("kv")["k"][0] == "1"
            follower = next(n for n in nodes.values() if n is not leader)
            with pytest.raises(NotLeader):
                await follower.driver.wait_linearizable("kv")
        nursery.cancel_scope.cancel()


class NoPeers:
    def send(self, peer: str, group: str, data: bytes) -> bool:
        return False


async def test_fsync_failure_stops_the_node(tmp_path):
    from quorum.log import CrashDisk, LogFailed

    disk = CrashDisk()
    log = AsyncLog.open(str(tmp_path), disk=disk)
    driver = NodeDriver("solo", log, NoPeers(), tick_interval=0.01,
                        options=RaftOptions(election_tick=3, heartbeat_tick=1), rng=random.Random(1))
    driver.add_group("kv", KvMachine(), ["solo"])
    outcome = []
    with pytest.raises(BaseExceptionGroup) as caught:
        async with trio.open_nursery() as nursery:
            await nursery.start(driver.run)
            with trio.fail_after(30):
                while not driver.status("kv").is_leader:
                    await trio.sleep(0.01)
                assert await driver.propose("kv", KvMachine.encode(KvSet("a", "1"))) is None
                disk.fail_fsync = True

                async def doomed():
                    try:
                        await driver.propose("kv", KvMachine.encode(KvSet("a", "2")))
                        outcome.append("committed")
                    except trio.Cancelled:
                        outcome.append("cancelled")
                        raise

                nursery.start_soon(doomed)
                await trio.sleep_forever()  # ended by the driver's failure
    assert caught.value.subgroup(LogFailed) is not None
    assert outcome == ["cancelled"]  # never reported as committed
    log.close()


async def test_control_transfers_leadership_and_entry_data_reads_bodies(tmp_path):
    async with trio.open_nursery() as nursery:
        nodes, _ = await start(nursery, tmp_path, ["kv"])
        with trio.fail_after(30):
            await propose_anywhere(nodes, "kv", KvSet("body", "payload"))
            leader = nodes[await wait_leader(nodes, "kv")]
            index = leader.driver.status("kv").commit
            found = [leader.driver.entry_data("kv", i) for i in range(1, index + 1)]
            assert KvMachine.encode(KvSet("body", "payload")) in found
            target = next(n for n in NAMES if n != leader.name)
            await leader.driver.control("kv", lambda r, now: r.transfer_leadership(target))
            while await wait_leader(nodes, "kv") != target:
                await trio.sleep(0.01)
            with pytest.raises(ValueError):
                await nodes[target].driver.control("kv", lambda r, now: r.transfer_leadership("nobody"))
        nursery.cancel_scope.cancel()


class InstallingKv(KvMachine):
    """Says, as a local effect, that it was given a snapshot by the leader."""

    def snapshot_installed(self, state) -> list:
        return [KvChanged("snapshot-installed", len(state))]


async def _one_left_behind(nodes):
    """Isolate a follower while the others commit 30 more entries: (it, the others)."""
    await propose_anywhere(nodes, "kv", KvSet("k", "first"))
    leader = await wait_leader(nodes, "kv")
    lagging = nodes[next(n for n in NAMES if n != leader)]
    lagging.isolated = True
    others = {n: v for n, v in nodes.items() if v is not lagging}
    for i in range(30):
        await propose_anywhere(others, "kv", KvSet(f"k{i}", str(i)))
    return lagging, others


async def test_a_follower_runs_the_effects_of_a_snapshot_it_receives(tmp_path):
    """Regression (found by the quorum queue simulation, tests/sim/queue_world.py): a follower
    that catches up through a snapshot never applies the entries it covers, so the deliveries
    those entries decided for consumers on its node were never made and the messages stayed
    checked out for good. The driver now runs the machine's `snapshot_installed(state)`
    effects (the fifo resends every checked-out message) right after installing one."""
    async with trio.open_nursery() as nursery:
        nodes, _ = await start(nursery, tmp_path, ["kv"], snapshot_every=10, machine=InstallingKv)
        with trio.fail_after(30):
            lagging, others = await _one_left_behind(nodes)
            snap = nodes[await wait_leader(others, "kv")].driver.raft("kv").snapshot_meta
            assert snap is not None and snap.index > lagging.driver.status("kv").last_index
            lagging.isolated = False
            while lagging.driver.state("kv").get("k29") is None:
                await trio.sleep(0.01)
        installed = [e for e in lagging.effects if e.key == "snapshot-installed"]
        assert installed and installed[-1].index >= 20  # the size of the state it was given
        assert not any(e.key == "snapshot-installed" for n in others.values() for e in n.effects)
        nursery.cancel_scope.cancel()


class LateSnapshotKv(InstallingKv):
    """Compacts only once told to: the snapshot then ends the log (nothing after it)."""

    allow = False

    def compactable(self, state, since: int) -> bool:
        return LateSnapshotKv.allow


async def test_a_follower_given_a_snapshot_that_ends_the_log_is_not_left_behind(tmp_path):
    """Regression (found by tests/cluster/test_jepsen.py): a replica that caught up through a
    snapshot with no entry after it counted as `behind` for good (its applied mark stayed
    before the snapshot), and a quorum queue holds its deliveries while its replica is behind:
    the last messages of a run stayed checked out, never delivered."""
    LateSnapshotKv.allow = False
    async with trio.open_nursery() as nursery:
        nodes, _ = await start(nursery, tmp_path, ["kv"], snapshot_every=10,
                               machine=LateSnapshotKv)
        with trio.fail_after(30):
            lagging, others = await _one_left_behind(nodes)
            leading = nodes[await wait_leader(others, "kv")].driver
            LateSnapshotKv.allow = True  # now compacts at its last applied entry
            while (leading.raft("kv").snapshot_meta is None or
                   leading.raft("kv").snapshot_meta.index < leading.status("kv").last_index):
                await trio.sleep(0.01)
            lagging.isolated = False
            while lagging.driver.state("kv").get("k29") is None:
                await trio.sleep(0.01)
            while lagging.driver.behind("kv"):  # stayed so for good before the fix
                await trio.sleep(0.01)
        nursery.cancel_scope.cancel()


class GatedKv(KvMachine):
    """Compacts only when told to."""

    allow = False

    def compactable(self, state, since: int) -> bool:
        return self.allow


async def test_propose_nowait_callbacks_and_compaction_gate(tmp_path):
    log = AsyncLog.open(str(tmp_path))
    driver = NodeDriver("solo", log, NoPeers(), tick_interval=0.01, snapshot_every=5,
                        options=RaftOptions(election_tick=3, heartbeat_tick=1), rng=random.Random(2))
    machine = GatedKv()
    driver.add_group("kv", machine, ["solo"])
    assert driver.has_group("kv") and not driver.has_group("other")
    results = []
    async with trio.open_nursery() as nursery:
        await nursery.start(driver.run)
        with trio.fail_after(30):
            while not driver.status("kv").is_leader:
                await trio.sleep(0.01)
            for i in range(12):
                driver.propose_nowait("kv", KvMachine.encode(KvSet("k", str(i))),
                                      lambda reply, err: results.append((reply, err)))
            driver.propose_nowait("kv", KvMachine.encode(KvSet("k", "fire-and-forget")))
            while driver.status("kv").applied < driver.status("kv").last_index or len(results) < 12:
                await trio.sleep(0.01)
            assert results[0] == (None, None) and results[-1] == ("10", None)
            assert driver.raft("kv").snapshot_meta is None  # the gate said no
            machine.allow = True
            await driver.propose("kv", KvMachine.encode(KvSet("k", "last")))
            assert driver.raft("kv").snapshot_meta is not None
        nursery.cancel_scope.cancel()
    log.close()


class CheckpointKv(GatedKv):
    """Checkpoints every 5 entries (when it does not compact); records what it applies; lets
    the log be compacted to a checkpoint up to `floor` (None: never)."""

    def __init__(self) -> None:
        self.applied: list[int] = []
        self.floor: int | None = None

    def release_floor(self, state) -> int | None:
        return self.floor

    def apply(self, meta, command, state):
        self.applied.append(meta.index)
        return super().apply(meta, command, state)

    def checkpoint(self, state, since: int) -> bytes | None:
        return self.snapshot(state) if since >= 5 else None


def _solo(log: AsyncLog, machine, snapshot_every: int = 10**6) -> NodeDriver:
    driver = NodeDriver("solo", log, NoPeers(), tick_interval=0.01, snapshot_every=snapshot_every,
                        options=RaftOptions(election_tick=3, heartbeat_tick=1),
                        rng=random.Random(2))
    driver.add_group("kv", machine, ["solo"])
    return driver


async def _fill(driver: NodeDriver, values: range) -> None:
    while not driver.status("kv").is_leader:
        await trio.sleep(0.01)
    for i in values:
        await driver.propose("kv", KvMachine.encode(KvSet(f"k{i % 4}", str(i))))


async def _caught_up(driver: NodeDriver, then=None) -> dict:
    """Run a (restarted) driver until it has applied its whole log; its state then. `then()`
    is awaited before it stops."""
    async with trio.open_nursery() as nursery:
        await nursery.start(driver.run)
        with trio.fail_after(30):
            while driver.status("kv").applied < driver.status("kv").last_index:
                await trio.sleep(0.01)
            state = dict(driver.state("kv"))
            if then is not None:
                await then()
        nursery.cancel_scope.cancel()
    return state


async def test_a_restart_restores_the_checkpoint_and_applies_only_the_entries_after_it(tmp_path):
    log = AsyncLog.open(str(tmp_path))
    driver = _solo(log, CheckpointKv())
    async with trio.open_nursery() as nursery:
        await nursery.start(driver.run)
        with trio.fail_after(30):
            await _fill(driver, range(23))
            # written in the background, one at a time: wait for one well into the log
            while (cp := _newest_checkpoint(log, "kv")) is None or cp.index < 15:
                await trio.sleep(0.01)
            await trio.sleep(0.1)  # a later one may be on its way: let it land
            if _newest_checkpoint(log, "kv").index == driver.status("kv").last_index:
                # one landed at the last entry (timing): one more entry for the restart to
                # apply after it (one entry past a checkpoint takes none)
                await _fill(driver, range(23, 24))
        nursery.cancel_scope.cancel()
    before = dict(driver.state("kv"))
    last = driver.status("kv").last_index
    log.close()
    assert driver.raft("kv").snapshot_meta is None  # a checkpoint is not a compaction

    log = AsyncLog.open(str(tmp_path))
    cp = _newest_checkpoint(log, "kv")
    machine = CheckpointKv()
    driver = _solo(log, machine)
    assert driver.status("kv").applied == cp.index < last
    assert await _caught_up(driver, then=lambda: driver.propose(
        "kv", KvMachine.encode(KvSet("after", "restart")))) == before
    assert machine.applied and min(machine.applied) > cp.index
    log.close()

    # the same log without the checkpoints: every entry is applied again, to the same state
    for path in _checkpoint_files(tmp_path, "kv"):
        os.remove(path)
    log = AsyncLog.open(str(tmp_path))
    machine = CheckpointKv()
    driver = _solo(log, machine)
    state = await _caught_up(driver)
    assert state == {**before, "after": state["after"]}
    assert min(machine.applied) <= cp.index
    log.close()


async def test_a_checkpoint_passed_by_a_snapshot_is_removed(tmp_path):
    log = AsyncLog.open(str(tmp_path))
    machine = CheckpointKv()
    driver = _solo(log, machine, snapshot_every=5)
    async with trio.open_nursery() as nursery:
        await nursery.start(driver.run)
        with trio.fail_after(30):
            await _fill(driver, range(12))
            while not _checkpoint_files(tmp_path, "kv"):
                await trio.sleep(0.01)
            machine.allow = True  # compaction may go past them now
            await _fill(driver, range(12, 20))
            while _checkpoint_files(tmp_path, "kv"):
                await trio.sleep(0.01)
            assert driver.raft("kv").snapshot_meta is not None
        nursery.cancel_scope.cancel()
    log.close()


async def test_three_nodes_restart_from_their_checkpoints_and_go_on(tmp_path):
    """Every replica checkpoints its own applied state (with the membership, here three
    voters); after all three stop, each restores its checkpoint, the group elects a leader
    and commits again, and every replica ends with the same state."""
    async with trio.open_nursery() as nursery:
        nodes, ports = await start(nursery, tmp_path, ["kv"], snapshot_every=10**6,
                                   machine=CheckpointKv)
        with trio.fail_after(60):
            for i in range(30):
                await propose_anywhere(nodes, "kv", KvSet(f"k{i % 4}", str(i)))
            for n in nodes.values():
                while (cp := _newest_checkpoint(n.log, "kv")) is None or cp.index < 20:
                    await trio.sleep(0.01)
            await trio.sleep(0.1)
            before = dict(nodes[await wait_leader(nodes, "kv")].driver.state("kv"))
        for n in nodes.values():
            n.cancel.cancel()
        await trio.sleep(0.05)
        nodes, _ = await start(nursery, tmp_path, ["kv"], snapshot_every=10**6, ports=ports,
                               machine=CheckpointKv)
        for n in nodes.values():
            st = n.driver.status("kv")
            assert st.applied >= 20 and n.driver.raft("kv").config.voters == tuple(NAMES)
        with trio.fail_after(60):
            await propose_anywhere(nodes, "kv", KvSet("after", "restart"))
            for n in nodes.values():
                while n.driver.state("kv").get("after") is None:
                    await trio.sleep(0.01)
                state = dict(n.driver.state("kv"))
                state.pop("after")
                assert {k: v[0] for k, v in state.items()} == {k: v[0] for k, v in before.items()}
        nursery.cancel_scope.cancel()


async def test_the_log_is_compacted_to_a_checkpoint_once_the_machine_releases_it(tmp_path):
    """ra's several release cursors: a checkpoint taken earlier becomes the snapshot once the
    machine's release floor reaches it (a quorum queue: its consumers passed it), so a log
    that could not be compacted when the checkpoint was taken lets go of what is below it."""
    log = AsyncLog.open(str(tmp_path))
    machine = CheckpointKv()
    driver = _solo(log, machine)
    async with trio.open_nursery() as nursery:
        await nursery.start(driver.run)
        with trio.fail_after(30):
            await _fill(driver, range(30))
            while len(log.checkpoint_indexes("kv")) < 3:
                await trio.sleep(0.01)
            await trio.sleep(0.1)
            first, second = log.checkpoint_indexes("kv")[:2]
            assert driver.raft("kv").snapshot_meta is None
            machine.floor = second - 1  # the newest checkpoint at or below it: `first`
            await _fill(driver, range(30, 31))
            while (meta := driver.raft("kv").snapshot_meta) is None:
                await trio.sleep(0.01)
            assert meta.index == first
            while first in log.checkpoint_indexes("kv"):
                await trio.sleep(0.01)
            assert second in log.checkpoint_indexes("kv")
            state = dict(driver.state("kv"))
        nursery.cancel_scope.cancel()
    log.close()
    log = AsyncLog.open(str(tmp_path))  # the compacted log restarts to the same state
    assert log.state("kv").snapshot_index == first
    assert await _caught_up(_solo(log, CheckpointKv())) == state
    log.close()


def _checkpoint_files(root, group: str) -> list[str]:
    d = os.path.join(str(root), "groups", group_dir_name(group))
    return [os.path.join(d, name) for name in os.listdir(d)
            if parse_checkpoint_name(name) is not None]


def _newest_checkpoint(log: AsyncLog, group: str):
    indexes = log.checkpoint_indexes(group)
    return log.read_checkpoint(group, indexes[-1]) if indexes else None


async def _submit(driver: NodeDriver, group: str, cmd) -> tuple:
    """`submit` with a callback, awaited: (reply, error)."""
    done = trio.Event()
    out: list = []

    def callback(reply, error):
        out.append((reply, error))
        done.set()

    driver.submit(group, KvMachine.encode(cmd), callback)
    await done.wait()
    return out[0]


async def test_submit_on_a_follower_forwards_and_answers_from_its_own_replica(tmp_path):
    async with trio.open_nursery() as nursery:
        nodes, _ = await start(nursery, tmp_path, ["kv"])
        with trio.fail_after(30):
            leader = await wait_leader(nodes, "kv")
            follower = nodes[next(n for n in NAMES if n != leader)]
            assert await _submit(follower.driver, "kv", KvSet("f", "1")) == (None, None)
            # the reply was computed by the follower's own machine, which has applied it
            assert follower.driver.state("kv")["f"][0] == "1"
            assert await _submit(follower.driver, "kv", KvSet("f", "2")) == ("1", None)
            # and on the leader, submit is a plain proposal
            assert await _submit(nodes[leader].driver, "kv", KvSet("f", "3")) == ("2", None)
        nursery.cancel_scope.cancel()


async def test_submit_waits_for_a_leader_and_reports_a_lost_forward_as_unknown(tmp_path):
    async with trio.open_nursery() as nursery:
        nodes, _ = await start(nursery, tmp_path, ["kv"])
        with trio.fail_after(30):
            leader = nodes[await wait_leader(nodes, "kv")]
            follower = nodes[next(n for n in NAMES if n != leader.name)]
            while follower.driver.status("kv").leader != leader.name:
                await trio.sleep(0.01)
            # the leader drops everything: the forwarded command is lost with it; once the
            # others elect a new leader (a new term) its outcome is reported unknown
            leader.isolated = True
            reply, error = await _submit(follower.driver, "kv", KvSet("lost?", "x"))
            assert reply is None and isinstance(error, LeadershipLost)
            # resent until it commits under the new leader; a resend may be lost too when the
            # election takes more than one term (a split vote on a slow machine), and one that
            # was reported lost may still have committed
            while True:
                reply, error = await _submit(follower.driver, "kv", KvSet("lost?", "y"))
                if error is None:
                    break
                assert isinstance(error, LeadershipLost)
            assert reply in (None, "x", "y")
            assert follower.driver.state("kv")["lost?"][0] == "y"
            leader.isolated = False
        nursery.cancel_scope.cancel()


class _NoPeers:
    def send(self, peer: str, group: str, data: bytes) -> bool:
        raise AssertionError(f"a one-member group sent to {peer}")


async def test_idle_one_member_groups_are_not_ticked(tmp_path):
    """A single node's groups (every quorum queue of a node without a cluster): once each leads
    itself, ticks change nothing for them, so the driver leaves them alone until they have work."""
    log = AsyncLog.open(str(tmp_path / "solo"), LogConfig())
    driver = NodeDriver("solo", log, _NoPeers(), tick_interval=0.005, options=_options)
    groups = [f"g{i}" for i in range(5)]
    for g in groups:
        driver.add_group(g, KvMachine(), ["solo"])
    async with trio.open_nursery() as nursery:
        await nursery.start(driver.run)
        while not all(driver.status(g).is_leader for g in groups):
            await trio.sleep(0.01)
        await driver.propose("g0", KvMachine.encode(KvSet("k", "v")))
        ticked = {g: 0 for g in groups}
        for g in groups:
            raft = driver.raft(g)
            raft.tick = lambda g=g, tick=raft.tick: (ticked.__setitem__(g, ticked[g] + 1), tick())
        await trio.sleep(0.02)  # the tick the ticker was sleeping towards
        passes = driver.iterations
        await trio.sleep(0.2)   # about 40 ticks of the driver
        assert ticked == {g: 0 for g in groups}
        assert driver.iterations == passes  # the ticker waits: no pass at all while idle
        # work still goes through at once
        await driver.propose("g3", KvMachine.encode(KvSet("k", "w")))
        assert driver.state("g3")["k"][0] == "w"
        nursery.cancel_scope.cancel()
    log.close()


async def test_the_ticker_starts_again_when_a_group_needs_ticks(tmp_path):
    """After every group led alone and the ticker waited, a new group (a follower until it
    elects itself, which takes ticks) still gets ticked, and leads."""
    log = AsyncLog.open(str(tmp_path / "solo"), LogConfig())
    driver = NodeDriver("solo", log, _NoPeers(), tick_interval=0.005, options=_options)
    driver.add_group("g0", KvMachine(), ["solo"])
    async with trio.open_nursery() as nursery:
        await nursery.start(driver.run)
        while not driver.status("g0").is_leader:
            await trio.sleep(0.01)
        await trio.sleep(0.05)
        driver.add_group("g1", KvMachine(), ["solo"])
        with trio.fail_after(10):
            while not driver.status("g1").is_leader:
                await trio.sleep(0.01)
        await driver.propose("g1", KvMachine.encode(KvSet("k", "v")))
        assert driver.state("g1")["k"][0] == "v"
        nursery.cancel_scope.cancel()
    log.close()
