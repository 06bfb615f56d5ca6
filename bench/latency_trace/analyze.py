"""Per-event latency (ms after the publisher sent) from the tracer's files and a probe's OUT:
p50 / p90 / p99 per event and node, sorted by median. Usage: analyze.py TRACE_DIR OUT"""
import sys, json, glob, statistics, collections
trace_dir, result = sys.argv[1], sys.argv[2]
got = json.load(open(result))
recv = dict(got)
ev = collections.defaultdict(dict)
kinds = collections.Counter()
for f in glob.glob(trace_dir + "/*.txt"):
    for line in open(f):
        parts = line.split()
        node, kind, sn, t = parts[0], parts[1], int(parts[2]), int(parts[3])
        extra = parts[4] if len(parts) > 4 else ""
        if sn not in recv:
            continue
        n = node.split("@")[0].replace("rabbit", "n")
        key = f"{kind}@{n}" + (f"<{extra.split('@')[0].replace('rabbit','n')}" if kind == "recv_resp" else "")
        if key not in ev[sn]:
            ev[sn][key] = t
            if kind == "recv_commit":
                kinds[(n, extra)] += 1
rows = collections.defaultdict(list)
for sn, r in recv.items():
    for k, t in ev[sn].items():
        rows[k].append((t - sn) / 1e6)
    rows["client_recv"].append((r - sn) / 1e6)
def q(v, p): v = sorted(v); return v[min(len(v)-1, int(len(v)*p))]
for k, v in sorted(rows.items(), key=lambda kv: statistics.median(kv[1])):
    print(f"{k:24} n={len(v):5} p50 {statistics.median(v):6.2f}  p90 {q(v,.9):6.2f}  p99 {q(v,.99):6.2f} ms")
print("recv_commit carried by:", dict(kinds))
