"""`QueueRecords`: live records per msg id and their live bytes per segment file."""

from amqp_broker.store.journal_index import UNPLACED, JournalIndex, position


def test_an_id_below_the_first_one_kept_is_recorded():
    """Recovery meets a record copied forward (a low msg id in a newer segment) after the
    records of higher ids: it must be kept, not written into an array already replaced."""
    index = JournalIndex()
    records = index.records("q")
    records.add(10, 80, position(1, 0))
    records.add(11, 80, position(1, 80))
    records.add(3, 90, position(2, 0))
    assert list(records.live()) == [(3, 90, position(2, 0)), (10, 80, position(1, 0)),
                                    (11, 80, position(1, 80))]
    assert records.count == 3 and records.bytes == 250
    assert index.segment_live == {1: 160, 2: 90}


def test_live_bytes_follow_records_between_segments():
    index = JournalIndex()
    a, b = index.records("a"), index.records("b")
    a.add(1, 100)                       # pending: counted nowhere yet
    assert index.segment_live == {}
    a.place(1, position(0, 0))
    b.add(1, 50, position(0, 100))
    assert index.segment_live == {0: 150}
    a.add(1, 100, position(3, 0))       # the same record again, copied forward
    assert index.segment_live == {0: 50, 3: 100} and a.by_segment == {3: 100}
    assert a.live_in(3) == [(1, 100, position(3, 0))] and a.live_in(0) == []
    index.remove("b", [1])
    assert index.segment_live == {3: 100}
    a.add(2, 70, UNPLACED)
    index.drop("a")
    assert index.segment_live == {}
