#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Conformance suite: turn the peer's two transcripts (kernel CM, libcep)
into one verdict per scenario, checked against expected.txt.

A transcript is a list of scenarios ("== name"), each a list of steps: the
peer's action ("> ..."), the application's answer ("= ..."), what came back
on the wire ("rx TYPE key=value ...") and measurements ("~ key=value"), and
the application's events ("ev C1 name key=value"). Two runs of one scenario
are compared step by step; every difference is named by a facet:
  steps            the two runs took different actions (the script adapted)
  mads / events    different messages or events (type, count, order)
  TYPE.key         a field of a message (REP.ack_delay, DREP.tid ...)
  ev.NAME.key      a field of an event (ev.rejected.status)
  answer, KEY      the application's answer (ok/err, rc) or a measurement
expected.txt says per scenario: agree, or which facets may differ and why
(defect N: known defect, issue 10 item N; stricter N: libcep deliberately
stricter once item N lands; deliberate; finding: found here, to triage).

  compare.py EXPECTED KERNEL_TRANSCRIPT LIBCEP_TRANSCRIPT [--markdown FILE]

Exit 0 when every scenario is as expected, 1 otherwise.
"""
import sys

STATUSES = ("agree", "defect", "stricter", "deliberate", "finding")


def parse_transcript(path):
    scenarios, order, cur, step = {}, [], None, None
    with open(path) as f:
        for raw in f:
            line = raw.rstrip("\n")
            if not line or line.startswith("#"):
                continue
            if line.startswith("== "):
                name = line[3:].strip()
                cur = scenarios.setdefault(name, [])
                order.append(name)
                step = None
                continue
            if cur is None:
                continue
            if line.startswith("> "):
                step = {"action": line[2:], "answer": [], "rx": [], "ev": []}
                cur.append(step)
                continue
            if step is None:
                step = {"action": "(none)", "answer": [], "rx": [], "ev": []}
                cur.append(step)
            if line.startswith("= "):
                step["answer"].append(line[2:])
            elif line.startswith("rx ") or line.startswith("~ "):
                step["rx"].append(line)
            elif line.startswith("ev "):
                step["ev"].append(line)
    return scenarios, order


def parse_expected(path):
    exp = {}
    with open(path) as f:
        for n, raw in enumerate(f, 1):
            line = raw.split("#", 1)[0].rstrip()
            if not line.strip():
                continue
            note = ""
            if " -- " in line:
                line, note = line.split(" -- ", 1)
            tok = line.split()
            name, status = tok[0], tok[1] if len(tok) > 1 else ""
            if status not in STATUSES:
                sys.exit(f"{path}:{n}: status must be one of {', '.join(STATUSES)}")
            item, facets = "-", set()
            if status != "agree":
                if len(tok) < 4:
                    sys.exit(f"{path}:{n}: '{status}' needs an item (or -) and facets")
                item, facets = tok[2], set(tok[3:])
            exp[name] = {"status": status, "item": item, "facets": facets,
                         "note": note.strip(), "line": n}
    return exp


def kv(line, skip):
    """key=value tokens of a line after its first @skip tokens."""
    out = {}
    for t in line.split()[skip:]:
        if "=" in t:
            k, v = t.split("=", 1)
            out[k] = v
    return out


def kind(line):
    t = line.split()
    if t[0] == "~":
        return "~ " + t[1].split("=", 1)[0]
    if t[0] == "ev":
        return "ev " + t[1] + " " + t[2]
    return "rx " + t[1]


def compare_lists(a, b, what, diffs, detail):
    if [kind(x) for x in a] != [kind(x) for x in b]:
        diffs.add(what)
        detail.append((what, " | ".join(a) or "(nothing)", " | ".join(b) or "(nothing)"))
        return
    for x, y in zip(a, b):
        t = x.split()
        skip = 3 if t[0] == "ev" else 2 if t[0] == "rx" else 1
        kx, ky = kv(x, skip), kv(y, skip)
        if t[0] == "~":
            kx, ky = kv(x, 1), kv(y, 1)
        for k in sorted(set(kx) | set(ky)):
            if kx.get(k) != ky.get(k):
                if t[0] == "rx":
                    facet = f"{t[1]}.{k}"
                elif t[0] == "ev":
                    facet = f"ev.{t[2]}.{k}"
                else:
                    facet = k
                diffs.add(facet)
                detail.append((facet, f"{kind(x)} {k}={kx.get(k, '-')}",
                               f"{kind(y)} {k}={ky.get(k, '-')}"))


def compare_scenario(ks, ls):
    diffs, detail = set(), []
    if len(ks) != len(ls) or any(x["action"] != y["action"] for x, y in zip(ks, ls)):
        diffs.add("steps")
        detail.append(("steps", " / ".join(s["action"] for s in ks),
                       " / ".join(s["action"] for s in ls)))
    for x, y in zip(ks, ls):
        if x["action"] != y["action"]:
            break
        ax = [a.split() for a in x["answer"]]
        ay = [a.split() for a in y["answer"]]
        if [a[:1] for a in ax] != [a[:1] for a in ay]:
            diffs.add("answer")
            detail.append(("answer", f"{x['action']}: {x['answer']}",
                           f"{y['action']}: {y['answer']}"))
        else:
            for a, b in zip(x["answer"], y["answer"]):
                ka, kb = kv(a, 1), kv(b, 1)
                for k in sorted(set(ka) | set(kb)):
                    if ka.get(k) != kb.get(k):
                        diffs.add(k)
                        detail.append((k, f"{x['action']}: {k}={ka.get(k, '-')}",
                                       f"{y['action']}: {k}={kb.get(k, '-')}"))
        compare_lists(x["rx"], y["rx"], "mads", diffs, detail)
        compare_lists(x["ev"], y["ev"], "events", diffs, detail)
    return diffs, detail


def summary(steps):
    """What came back, in short: message types, events, rc values."""
    out = []
    for s in steps:
        for a in s["answer"]:
            if "rc=" in a:
                out.append(a.split()[0] + " " + next(t for t in a.split() if t.startswith("rc=")))
        for r in s["rx"]:
            t = r.split()
            out.append(t[1] if t[0] == "rx" else t[1])
        for e in s["ev"]:
            t = e.split()
            out.append("ev:" + t[2] + ("(" + t[3] + ")" if len(t) > 3 else ""))
    return ", ".join(out) or "nothing"


def main(argv):
    md = None
    if "--markdown" in argv:
        i = argv.index("--markdown")
        md = argv[i + 1]
        del argv[i:i + 2]
    if len(argv) != 4:
        sys.exit(__doc__)
    exp = parse_expected(argv[1])
    kern, korder = parse_transcript(argv[2])
    lib, lorder = parse_transcript(argv[3])
    names = list(dict.fromkeys(korder + lorder + list(exp)))
    rows, bad, counts = [], 0, {}
    for name in names:
        e = exp.get(name)
        if name not in kern or name not in lib:
            where = "kernel" if name not in kern else "libcep"
            verdict, ok = f"NOT RUN against {where}", False
            diffs, detail = set(), []
        else:
            diffs, detail = compare_scenario(kern[name], lib[name])
            if e is None:
                verdict, ok = "no line in expected.txt", False
            elif not diffs:
                if e["status"] == "agree":
                    verdict, ok = "agree", True
                elif e["status"] == "stricter":
                    verdict = (f"agree (libcep becomes stricter here with issue 10 "
                               f"item {e['item']}, not in yet)")
                    ok = True
                else:
                    verdict = (f"agree - expected {e['status']} {e['item']}: "
                               "flip its line in expected.txt to agree")
                    ok = True
            elif e["status"] == "agree":
                verdict, ok = "DIFFER (unexpected: " + " ".join(sorted(diffs)) + ")", False
            elif "*" in e["facets"] or diffs <= e["facets"]:
                what = {"defect": f"known defect, issue 10 item {e['item']}",
                        "stricter": f"deliberate: libcep stricter (issue 10 item {e['item']})",
                        "deliberate": "deliberate",
                        "finding": "finding, not in issue 10"}[e["status"]]
                verdict, ok = f"differ ({what}: " + " ".join(sorted(diffs)) + ")", True
            else:
                verdict = ("DIFFER beyond the expected facets: "
                           + " ".join(sorted(diffs - e["facets"])))
                ok = False
        if not ok:
            key = "FAIL"
        elif not diffs:
            key = "agree" if e["status"] in ("agree", "stricter") else "flipped to agree"
        else:
            key = e["status"]
        counts[key] = counts.get(key, 0) + 1
        bad += not ok
        rows.append((name, kern.get(name, []), lib.get(name, []), verdict, detail, e, ok))

    for name, ks, ls, verdict, detail, e, ok in rows:
        print(f"{'ok  ' if ok else 'FAIL'} {name}: {verdict}")
        print(f"       kernel: {summary(ks)}")
        print(f"       libcep: {summary(ls)}")
        for facet, a, b in detail:
            print(f"       {facet}: kernel {a}")
            print(f"       {' ' * len(facet)}  libcep {b}")
        if e and e["note"] and (detail or not ok):
            print(f"       why: {e['note']}")
    total = len(rows)
    print("conformance: %d scenarios: %s" % (
        total, ", ".join(f"{v} {k}" for k, v in sorted(counts.items()))))
    if md:
        with open(md, "w") as f:
            f.write("| scenario | kernel | libcep | verdict |\n|---|---|---|---|\n")
            for name, ks, ls, verdict, detail, e, ok in rows:
                f.write(f"| {name} | {summary(ks)} | {summary(ls)} | {verdict} |\n")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
