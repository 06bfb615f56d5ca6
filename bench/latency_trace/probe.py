"""Latency probe for the tracer: a quorum queue declared on node D (client-local: it leads),
a publisher on node P paced at 1000 msg/s for 3 s, a consumer on node C; prints p50 / p99 and
writes each message's (send_ns, recv_ns) as JSON to OUT.

    python bench/latency_trace/probe.py URL1,URL2,URL3 D P C OUT [SIZE]     (D, P, C from 0)
    python bench/latency_trace/analyze.py TRACE_DIR OUT
"""
import sys, os, time, struct, statistics, multiprocessing as mp, json
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from amqp_wire import WireClient, FRAME_METHOD, method_ids, parse_deliver_tag  # noqa
import broker_bench as bb

def consumer(url, queue, count, results):
    c = WireClient(url); c.qos(500); c.consume(queue)
    got = []; out = bytearray(); n = 0
    while n < count:
        ft, _, p = c.read_frame()
        if ft == FRAME_METHOD and method_ids(p) == (60, 60):
            n += 1; out += c.ack_frame(parse_deliver_tag(p))
        elif ft == 3:
            got.append((struct.unpack_from(">Q", p, 0)[0], time.monotonic_ns()))
        if out and not c.frames_available():
            c.send_raw(bytes(out)); out.clear()
    if out: c.send_raw(bytes(out))
    results.put(got); c.close()

def main():
    urls = sys.argv[1].split(","); d, p, cn = (int(x) for x in sys.argv[2:5]); out = sys.argv[5]
    size = int(sys.argv[6]) if len(sys.argv) > 6 else 1024
    rate, secs = 1000.0, 3.0
    q = f"probe.{d}{p}{cn}.{time.time_ns()}"
    args = {"x-queue-type": "quorum", "x-quorum-initial-group-size": 3}
    bb._declare_fresh(urls[d], q, args, visible_on=urls[cn])
    count = int(rate * secs)
    res = mp.Queue()
    cons = mp.Process(target=consumer, args=(urls[cn], q, count, res)); cons.start()
    time.sleep(0.5)
    bb.publisher(urls[p], q, count, size, 1000, rate=rate)
    got = res.get(timeout=120); cons.join()
    bb.delete_queue(urls[0], q)
    lat = sorted((r - s) / 1e6 for s, r in got)
    print(f"decl{d+1} pub{p+1} cons{cn+1}: p50 {statistics.median(lat):.2f} p99 {lat[int(len(lat)*.99)-1]:.2f} ms")
    with open(out, "w") as f:
        json.dump(got, f)
main()
