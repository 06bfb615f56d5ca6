"""The node's deadline heap: targets fire at their deadline, an earlier deadline moves the
sleep forward, and a dropped deadline neither fires nor wakes the timer task."""

import trio
import trio.testing

from amqp_broker.server.timers import DeadlineHeap


class FakeBroker:
    """The clock and batch-end hook the heap uses; `wakes` counts the timer task's passes."""

    def __init__(self) -> None:
        self.wakes = 0
        self.pending_runs = 0

    def clock_ms(self) -> int:
        return int(trio.current_time() * 1000)

    def update_clock(self) -> int:
        self.wakes += 1
        return self.clock_ms()

    def run_pending(self) -> None:
        self.pending_runs += 1


class Target:
    def __init__(self) -> None:
        self.timer_deadline = None
        self.fired_at: list[int] = []

    def arm(self, heap: DeadlineHeap, at_ms: int) -> None:
        self.timer_deadline = at_ms
        heap.schedule(at_ms, self)

    def on_timer(self, now_ms: int) -> None:
        self.timer_deadline = None
        self.fired_at.append(now_ms)


def run(test):
    trio.run(test, clock=trio.testing.MockClock(autojump_threshold=0))


async def _with_heap(body):
    heap, broker = DeadlineHeap(), FakeBroker()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(heap.run, broker)
        await trio.sleep(0.001)
        await body(heap, broker)
        nursery.cancel_scope.cancel()


def test_a_target_fires_once_at_its_deadline_and_an_earlier_one_goes_first():
    async def body(heap, broker):
        start = broker.clock_ms()
        late, early = Target(), Target()
        late.arm(heap, start + 100)
        await trio.sleep(0.010)
        early.arm(heap, start + 30)      # while the task sleeps towards +100
        await trio.sleep(0.200)
        assert early.fired_at == [start + 30]
        assert late.fired_at == [start + 100]
        assert broker.wakes == 2 and broker.pending_runs == 2
        assert len(heap) == 0
    run(lambda: _with_heap(body))


def test_a_dropped_deadline_neither_fires_nor_wakes_the_task():
    async def body(heap, broker):
        start = broker.clock_ms()
        target = Target()
        for step in range(5):            # armed and dropped again, as held-back acks are
            target.arm(heap, start + 5 + step)
            target.timer_deadline = None
            heap.forget()
        await trio.sleep(1.0)
        assert target.fired_at == [] and broker.wakes == 0
        target.arm(heap, start + 2000)   # a new deadline after all that still fires
        await trio.sleep(2.0)
        assert target.fired_at == [start + 2000] and broker.wakes == 1
    run(lambda: _with_heap(body))


def test_a_deadline_moved_later_fires_at_the_new_time_only():
    async def body(heap, broker):
        start = broker.clock_ms()
        target = Target()
        target.arm(heap, start + 20)
        target.arm(heap, start + 80)     # re-armed later: the +20 entry is stale
        await trio.sleep(0.050)
        assert target.fired_at == [] and broker.wakes == 0
        await trio.sleep(0.100)
        assert target.fired_at == [start + 80] and broker.wakes == 1
    run(lambda: _with_heap(body))
