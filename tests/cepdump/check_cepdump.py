#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""cepdump --flow and --summary on captures of real CM exchanges.

usage: check_cepdump.py MAKE_CAPTURES CEPDUMP WORKDIR

make-captures runs two CMs (A active, lid 1; B passive, lid 2) on the
in-process fabric and writes what each sends (lost MADs included) to one
pcap per scenario and to service.pcap, plus expect.txt with the CMs' own
counters; duplicated.pcap is captured where MADs are delivered, with the
fabric copying each one. This script reads the same files with its own minimal pcap / IB
parser (independent of cepdump and libcep) and checks that cepdump's
verdicts, ladders, counts and latency percentiles say what the packets say:
which connection failed and why, problems first.
"""
import math
import os
import re
import shutil
import struct
import subprocess
import sys

fails = 0

REQ, MRA, REJ, REP, RTU, DREQ, DREP, SIDR_REQ, SIDR_REP = (
    0x10, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18)
NAMES = {REQ: "REQ", MRA: "MRA", REJ: "REJ", REP: "REP", RTU: "RTU", DREQ: "DREQ",
         DREP: "DREP", SIDR_REQ: "SIDR_REQ", SIDR_REP: "SIDR_REP"}


def check(cond, what):
    global fails
    if not cond:
        fails += 1
        print("FAIL:", what)
    return cond


def run(cmd):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120)
    check(p.returncode == 0, "%s exited %d: %s" % (cmd, p.returncode, p.stderr.decode()[-2000:]))
    return p.stdout.decode()


def mads(path):
    """(time in s, slid, dlid, attr, tid, fields) per record of a
    LINKTYPE_INFINIBAND pcap: LRH 8 / BTH 12 / DETH 8 / MAD (IBTA vol. 1
    5.2, 9.x; CM fields per tables 106-120)."""
    data = open(path, "rb").read()
    magic, _, _, _, _, _, link = struct.unpack("<IHHiIII", data[:24])
    assert magic == 0xa1b2c3d4 and link == 247, (hex(magic), link)
    off, out = 24, []
    while off + 16 <= len(data):
        sec, usec, incl, _ = struct.unpack("<IIII", data[off:off + 16])
        fr = data[off + 16:off + 16 + incl]
        off += 16 + incl
        dlid, slid = struct.unpack(">H", fr[2:4])[0], struct.unpack(">H", fr[6:8])[0]
        mad = fr[28:28 + 256]
        cm = mad[24:]
        u32 = lambda o: struct.unpack(">I", cm[o:o + 4])[0]
        u24 = lambda o: u32(o - 1) & 0xffffff
        attr = struct.unpack(">H", mad[16:18])[0]
        f = {"local": u32(0), "remote": u32(4)}
        if attr == REQ:
            f.update(remote=0, qpn=u24(32), sid=struct.unpack(">Q", cm[8:16])[0],
                     remote_timeout=cm[43] >> 3, local_timeout=cm[47] >> 3)
        elif attr == REP:
            f.update(qpn=u24(12))
        elif attr == REJ:
            f.update(reason=struct.unpack(">H", cm[10:12])[0])
        elif attr in (SIDR_REQ, SIDR_REP):
            f = {"request": u32(0)}
            if attr == SIDR_REP:
                f.update(status=cm[4], qpn=u24(8))
        out.append((sec + usec / 1e6, slid, dlid, attr, struct.unpack(">Q", mad[8:16])[0], f))
    return out


def connections(recs):
    """Group by the active side's comm ID (comm IDs are unique here):
    A's MADs carry it as local, B's as remote."""
    conns = {}
    for r in recs:
        t, slid, _, attr, _, f = r
        if attr in (SIDR_REQ, SIDR_REP):
            continue
        key = f["local"] if slid == 1 else f["remote"]
        conns.setdefault(key, []).append(r)
    return conns


def latencies(recs):
    """REQ (first copy) -> RTU (first) per established connection, in s."""
    out = []
    for ms in connections(recs).values():
        req = [m[0] for m in ms if m[3] == REQ]
        rtu = [m[0] for m in ms if m[3] == RTU]
        if req and rtu:
            out.append(rtu[0] - req[0])
    return sorted(out)


def repeated(recs):
    """MADs whose (sender, type, TID) was sent before."""
    seen, n = set(), 0
    for r in recs:
        k = (r[1], r[3], r[4])
        n += k in seen
        seen.add(k)
    return n


TIMER_RESENT = (REQ, REP, DREQ, SIDR_REQ)   # LAP too; none here


def expected_ladder(ms_):
    """The rungs one connection's MADs should get, from the spec: a MAD
    sent again (same sender, type, TID) is a retry when a timer resends
    that type and the gap is at least half the sender's response timeout
    from the REQ (IBTA 12.6: the active side waits the REQ's Remote CM
    Response Timeout, the passive side its Local CM Response Timeout),
    else a duplicate."""
    req = [m for m in ms_ if m[3] == REQ]
    half = {}
    if req:
        half = {1: 4.096e-6 * 2 ** req[0][5]["remote_timeout"] / 2,
                2: 4.096e-6 * 2 ** req[0][5]["local_timeout"] / 2}
    out, last, copies = [], {}, {}
    for t, slid, _, attr, tid, _ in ms_:
        k = (slid, attr, tid)
        name = NAMES[attr]
        if k in last:
            copies[k] = copies.get(k, 0) + 1
            if attr in TIMER_RESENT and t - last[k] >= half.get(slid, 0) - 2e-6:
                name += " retry %d" % copies[k]
            else:
                name += " dup"
        last[k] = t
        out.append((name, "AB" if slid == 1 else "BA"))
    return out


def nearest_rank(v, p):
    return v[max(1, math.ceil(p * len(v) / 100)) - 1]


def ladder(flow, group):
    """The rungs of group #N in --flow output: [(time, name, 'AB'|'BA', details)]."""
    m = re.search(r"^#%d .*?\n(.*?)(?=\n\n|\n----|\Z)" % group, flow, re.S | re.M)
    if not check(m is not None, "flow has no #%d" % group):
        return []
    out = []
    for line in m.group(1).splitlines():
        r = re.match(r"\s+(\d+\.\d+)  \|(<?)-+ (.+?) -+(>?)\|\s*(.*)$", line)
        if r:
            out.append((float(r.group(1)), r.group(3), "BA" if r.group(2) else "AB", r.group(5)))
    return out


def groups_in_order(text):
    """[(number, label, why)] of every '#N LABEL: why' line, in order."""
    return [(int(n), lab, why) for n, lab, why in
            re.findall(r"^\s*#(\d+) ((?:SIDR )?[A-Z ]+): (.*)$", text, re.M)]


def summary_table(s):
    rows = {}
    for name, sent, rt, dup, inv in re.findall(r"^  (\w+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)$", s, re.M):
        rows[name] = (int(sent), int(rt), int(dup), int(inv))
    return rows


def ms(text, what):
    """A duration printed by cepdump ('0.070 ms', '1.204 s') after @what."""
    m = re.search(re.escape(what) + r" (\d+\.\d+) (ms|s)\b", text)
    if not check(m is not None, "no %r in %r" % (what, text[:300])):
        return -1
    return float(m.group(1)) * (1 if m.group(2) == "ms" else 1000)


def check_normal(cd, d):
    path = os.path.join(d, "normal.pcap")
    recs = mads(path)
    s = run([cd, "-q", "--summary", path])
    check("1 connection, 0 SIDR lookups" in s, "normal: header: " + s[:200])
    check("problems: none" in s, "normal: problems listed")
    tab = summary_table(s)
    check(tab == {"REQ": (1, 0, 0, 0), "REP": (1, 0, 0, 0), "RTU": (1, 0, 0, 0),
                  "DREQ": (1, 0, 0, 0), "DREP": (1, 0, 0, 0)}, "normal: table %s" % tab)
    lat = latencies(recs)[0] * 1e3
    check(abs(ms(s, "p50") - lat) < 0.0015 and abs(ms(s, "max") - lat) < 0.0015,
          "normal: latency %.3f ms:\n%s" % (lat, s))
    f = run([cd, "-q", "--flow", path])
    rungs = ladder(f, 1)
    check([(n, d_) for _, n, d_, _ in rungs] ==
          [("REQ", "AB"), ("REP", "BA"), ("RTU", "AB"), ("DREQ", "AB"), ("DREP", "BA")],
          "normal: ladder %s" % rungs)
    req = [r for r in recs if r[3] == REQ][0]
    rep = [r for r in recs if r[3] == REP][0]
    check("QPN 0x%06x" % req[5]["qpn"] in rungs[0][3] and "comm 0x%08x" % req[5]["local"] in rungs[0][3],
          "normal: REQ details %r" % (rungs[0],))
    check("QPN 0x%06x" % rep[5]["qpn"] in rungs[1][3] and "comm 0x%08x" % rep[5]["local"] in rungs[1][3],
          "normal: REP details %r" % (rungs[1],))
    check(re.search(r"^#1 OK: established in [\d.]+ ms, disconnected$", f, re.M) is not None,
          "normal: verdict\n" + f)
    check("A active    lid 1  CA 0x0002c90300000a01  comm 0x%08x" % req[5]["local"] in f,
          "normal: A's end line\n" + f)
    # the time column is the time since the connection's first MAD
    for (t, _, _, _), r in zip(rungs, recs):
        check(abs(t - (r[0] - recs[0][0])) < 2e-6, "normal: time %f vs %f" % (t, r[0] - recs[0][0]))


def check_rejected(cd, d):
    for name, reason in (("rejected", "Consumer Reject (28)"), ("no-listener", "Invalid Service ID (8)")):
        path = os.path.join(d, name + ".pcap")
        recs = mads(path)
        check([r[3] for r in recs] == [REQ, REJ], "%s: capture holds %s" % (name, [r[3] for r in recs]))
        s = run([cd, "-q", "--summary", path])
        check(re.search(r"problems, worst first \(1;.*\n  #1 REJECTED: %s from B, to the REQ\n"
                        % re.escape(reason), s) is not None, "%s: problem line:\n%s" % (name, s))
        check(re.search(r"^  %s\s+1$" % re.escape(reason), s, re.M) is not None,
              "%s: REJ reasons:\n%s" % (name, s))
        check("no connection with both" in s, "%s: latency of a rejected connection" % name)
        rungs = ladder(run([cd, "-q", "--flow", path]), 1)
        check([(n, d_) for _, n, d_, _ in rungs] == [("REQ", "AB"), ("REJ", "BA")], "%s: %s" % (name, rungs))
        check(rungs and rungs[-1][3].startswith(reason + ", REQ rejected"), "%s: REJ details" % name)


def check_retried(cd, d):
    path = os.path.join(d, "retried.pcap")
    recs = mads(path)
    reqs = [r for r in recs if r[3] == REQ]
    check(len(reqs) >= 2 and len({r[4] for r in reqs}) == 1, "retried: %d REQs" % len(reqs))
    s = run([cd, "-q", "--summary", path])
    check(re.search(r"  #1 RETRIED: established in [\d.]+ ms, disconnected; REQ sent %d times[;\n]"
                    % len(reqs), s) is not None, "retried: problem line:\n" + s)
    check(summary_table(s).get("REQ") == (len(reqs), len(reqs) - 1, 0, 0), "retried: REQ row")
    lat = latencies(recs)[0] * 1e3
    check(abs(ms(s, "max") - lat) < 0.0015 and lat >= (reqs[-1][0] - reqs[0][0]) * 1e3,
          "retried: latency %.3f ms" % lat)
    rungs = ladder(run([cd, "-q", "--flow", path]), 1)
    names = [n for _, n, _, _ in rungs]
    check(names[:len(reqs)] == ["REQ"] + ["REQ retry %d" % i for i in range(1, len(reqs))],
          "retried: ladder %s" % names)
    check([(n, d_) for _, n, d_, _ in rungs] == expected_ladder(recs), "retried: ladder %s" % rungs)


def check_timed_out(cd, d):
    path = os.path.join(d, "timed-out.pcap")
    recs = mads(path)
    # make-captures: max_cm_retries 2, every MAD lost: 1 + 2 REQs, then
    # A's REJ Timeout (docs/protocol.md coverage line 9)
    check([r[3] for r in recs] == [REQ, REQ, REQ, REJ] and recs[-1][1] == 1 and recs[-1][5]["reason"] == 4,
          "timed-out: capture holds %s" % [(r[3], r[1]) for r in recs])
    s = run([cd, "-q", "--summary", path])
    check("  #1 TIMED OUT: no REP to 3 REQs: A gave up, REJ Timeout\n" in s, "timed-out: problem line\n" + s)
    rungs = ladder(run([cd, "-q", "--flow", path]), 1)
    check([(n, d_) for _, n, d_, _ in rungs] ==
          [("REQ", "AB"), ("REQ retry 1", "AB"), ("REQ retry 2", "AB"), ("REJ", "AB")],
          "timed-out: ladder %s" % rungs)
    check(rungs and "Timeout (4)" in rungs[-1][3] and "CA 0x0002c90300000a01" in rungs[-1][3],
          "timed-out: REJ details %s" % (rungs[-1:],))


def check_sidr(cd, d):
    path = os.path.join(d, "sidr.pcap")
    recs = mads(path)
    ok = [r for r in recs if r[3] == SIDR_REP and r[5]["status"] == 0]
    s = run([cd, "-q", "--summary", path])
    check("0 connections, 2 SIDR lookups" in s, "sidr: header")
    check(re.search(r"  #2 SIDR REJECTED: SIDR_REP Service ID not supported \(1\)\n", s) is not None,
          "sidr: problem line\n" + s)
    check("SIDR lookups: 2, 1 REJECTED, 1 OK" in s, "sidr: tally")
    f = run([cd, "-q", "--flow", path])
    check(ok and re.search(r"^#1 SIDR OK: answered in [\d.]+ ms: QPN 0x%06x" % ok[0][5]["qpn"], f, re.M)
          is not None, "sidr: answered\n" + f)
    for g in (1, 2):
        check([(n, d_) for _, n, d_, _ in ladder(f, g)] == [("SIDR_REQ", "AB"), ("SIDR_REP", "BA")],
              "sidr: ladder #%d" % g)


def check_rtu_lost(cd, d):
    """A's first RTU lost: B's REP timer resends the REP, A resends the RTU."""
    path = os.path.join(d, "rtu-lost.pcap")
    recs = mads(path)
    s = run([cd, "-q", "--summary", path])
    check("  #1 RETRIED: established in " in s and "; REP sent 2 times" in s and "1 duplicate" in s,
          "rtu-lost: problem line\n" + s)
    check(summary_table(s).get("REP") == (2, 1, 0, 0) and summary_table(s).get("RTU") == (2, 0, 1, 0),
          "rtu-lost: table %s" % summary_table(s))
    # the latency ends at the first RTU A sent, lost or not
    lat = latencies(recs)[0] * 1e3
    check(abs(ms(s, "max") - lat) < 0.0015, "rtu-lost: latency")
    rungs = [(n, d_) for _, n, d_, _ in ladder(run([cd, "-q", "--flow", path]), 1)]
    check(rungs[:5] == [("REQ", "AB"), ("REP", "BA"), ("RTU", "AB"), ("REP retry 1", "BA"),
                        ("RTU dup", "AB")], "rtu-lost: ladder %s" % rungs)
    check(rungs == expected_ladder(recs), "rtu-lost: ladder %s" % rungs)


def check_duplicated(cd, d):
    """Every MAD copied by the network, captured where it is delivered: the
    copies are duplicates (microseconds after the original, far below the
    CM response timeout), never retries; nothing is a problem."""
    path = os.path.join(d, "duplicated.pcap")
    recs = mads(path)
    n = repeated(recs)
    check(n >= len(recs) // 2, "duplicated: %d copies in %d MADs" % (n, len(recs)))
    f = run([cd, "-q", "--flow", path])
    rungs = ladder(f, 1)
    check(len(rungs) == len(recs), "duplicated: %d rungs, %d MADs" % (len(rungs), len(recs)))
    check(sum(1 for _, w, _, _ in rungs if w.endswith(" dup")) == n and
          not any("retry" in w for _, w, _, _ in rungs), "duplicated: marks %s" % rungs)
    check(re.search(r"^#1 OK: established in [\d.]+ ms, disconnected; %d duplicates$" % n, f, re.M)
          is not None, "duplicated: verdict\n" + f)


def check_unanswered(cd, d):
    path = os.path.join(d, "unanswered.pcap")
    s = run([cd, "-q", "--summary", path])
    check("  #1 NOT ESTABLISHED: no answer to 1 REQ in the capture\n" in s, "unanswered\n" + s)


def check_service(cd, d):
    """All scenarios in one capture, as a failing service would leave it."""
    path = os.path.join(d, "service.pcap")
    recs = mads(path)
    expect = dict(l.rsplit(" ", 1) for l in open(os.path.join(d, "expect.txt")).read().splitlines())
    s = run([cd, "-q", "--summary", path])
    tab = summary_table(s)
    # per type: what the CMs say they sent = what is in the file = cepdump
    for attr, name in NAMES.items():
        n = sum(1 for r in recs if r[3] == attr)
        check(int(expect["sent " + name]) == n, "service: %s: CMs sent %s, file has %d"
              % (name, expect["sent " + name], n))
        check(tab.get(name, (0,))[0] == n, "service: %s: cepdump %s, file %d" % (name, tab.get(name), n))
    # sent again = retried by a timer (the CMs count those) or duplicated
    check(sum(v[1] for v in tab.values()) == int(expect["retries"]),
          "service: retries: cepdump %d, CMs %s" % (sum(v[1] for v in tab.values()), expect["retries"]))
    check(sum(v[1] + v[2] for v in tab.values()) == repeated(recs),
          "service: retries + duplicates %d, %d MADs sent again" %
          (sum(v[1] + v[2] for v in tab.values()), repeated(recs)))
    check("10 connections, 2 SIDR lookups" in s, "service: groups: " + s[:200])
    # problems first: the problem list precedes everything, worst first
    head = s.split("\nconnections:")[0]
    got = [lab for _, lab, _ in groups_in_order(head)]
    check(got == ["REJECTED", "REJECTED", "SIDR REJECTED", "TIMED OUT", "NOT ESTABLISHED", "RETRIED",
                  "RETRIED"], "service: problem order %s" % got)
    check("connections: 10, 2 REJECTED, 1 TIMED OUT, 1 NOT ESTABLISHED, 2 RETRIED, 4 OK; "
          "6 disconnected (DREQ)" in s, "service: tally\n" + s)
    # setup latency percentiles, nearest rank, from the packets
    lat = [x * 1e3 for x in latencies(recs)]
    check(len(lat) == 6 and "over 6 connections" in s, "service: %d latencies" % len(lat))
    for p in (50, 90, 99):
        check(abs(ms(s, "p%d" % p) - nearest_rank(lat, p)) < 0.0015,
              "service: p%d %.3f ms, packets say %.3f" % (p, ms(s, "p%d" % p), nearest_rank(lat, p)))
    check(abs(ms(s, "max") - lat[-1]) < 0.0015, "service: max")
    # --flow: the same order, every MAD on one rung of its own connection
    f = run([cd, "-q", "--flow", path])
    order = groups_in_order(f)
    check([lab for _, lab, _ in order][:7] == got, "service: flow order %s" % order)
    check(f.index("---- no problem seen ----") > f.index("#%d " % order[6][0]) and
          f.index("---- no problem seen ----") < f.index("#%d " % order[7][0]),
          "service: problem separator")
    rungs = sum(len(ladder(f, n)) for n, _, _ in order)
    check(rungs == len(recs), "service: %d rungs for %d MADs" % (rungs, len(recs)))
    for key, ms_ in connections(recs).items():
        m = re.search(r"^#(\d+) .*\n   A active    lid 1  CA \S+  comm 0x%08x" % key, f, re.M)
        if check(m is not None, "service: no ladder for comm 0x%08x" % key):
            got = [(n, d_) for _, n, d_, _ in ladder(f, int(m.group(1)))]
            check(got == expected_ladder(ms_), "service: comm 0x%08x: %s, packets say %s"
                  % (key, got, expected_ladder(ms_)))


def check_aborted(cd, d):
    """A destroyed its id right after its REQ: REJ Timeout from A long before
    the REQ's remote CM response timeout (IBTA 12.6.2: REQ retries wait for
    it; the kernel's cm_destroy_id sends REJ Timeout from REQ_SENT). An
    abort, not a timeout, and the timeout it did not wait for is named."""
    path = os.path.join(d, "aborted.pcap")
    recs = mads(path)
    check([r[3] for r in recs] == [REQ, REJ] and recs[1][1] == 1 and recs[1][5]["reason"] == 4,
          "aborted: capture holds %s" % [(r[3], r[1]) for r in recs])
    if len(recs) != 2:
        return
    waited = recs[1][0] - recs[0][0]
    timeout = 4.096e-6 * 2 ** recs[0][5]["remote_timeout"]
    check(waited < timeout, "aborted: REJ %.6f s after the REQ, timeout %.3f s" % (waited, timeout))
    s = run([cd, "-q", "--summary", path])
    check(re.search(r"  #1 ABORTED: A gave up [0-9.]+ m?s after its REQ, sooner than the REQ's "
                    r"response timeout \(%.3f s\) lets a timer expire: the application ended it "
                    r"\(REJ Timeout\)\n" % timeout, s) is not None, "aborted: problem line\n" + s)
    check("TIMED OUT" not in s and "connections: 1, 1 ABORTED;" in s, "aborted: tally\n" + s)


def main():
    make, cd, work = sys.argv[1:4]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    run([make, work])
    for t in (check_normal, check_rejected, check_retried, check_timed_out, check_sidr,
              check_rtu_lost, check_duplicated, check_unanswered, check_service, check_aborted):
        t(cd, work)
    # the views refuse to mix with the per-MAD outputs
    p = subprocess.run([cd, "--flow", "--json", os.path.join(work, "normal.pcap")],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60)
    check(p.returncode == 2 and p.stdout == b"", "--flow --json accepted")
    if fails:
        print("%d check(s) failed" % fails)
        return 1
    print("cepdump flow/summary checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
