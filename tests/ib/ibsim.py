#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The ib tier: libcep's SA client against the real OpenSM on Debian's
ibsim. Starts ibsim on a small fabric (one switch, the SM's HCA and two
more), OpenSM under libumad2sim.so, waits (bounded) for SUBNET UP, then
runs sa-ibsim on Hca1 and compares its PathRecords (by LIDs and by GIDs)
and ClassPortInfo with saquery's answers, field by field. A query to a
LID that does not exist, and one while OpenSM is stopped (SIGSTOP), must
end in an error within their time bound, never hang. Every wait has a
timeout; ibsim and OpenSM die with this script (their process groups).
Then cep-storm and cep-bench connect with --sa on Hca1: their one
PathRecord (to Hca2, by LID and by GID) must be saquery's, and every REQ
of the storm must carry it (LIDs, GIDs, P_Key, MTU, SL, rate, and the ACK
timeout from its packet life time); the CM's MADs cross the in-process
fabric, only the SA query goes to ibsim.
Multicast: sa-ibsim reads IPoIB's broadcast group (MCMemberRecord Get,
compared with saquery -g), joins a group of rdma_cm's signature from Hca1
and Hca2 with that group's parameters (OpenSM creates it, both get its
MLID, saquery -g lists it), and leaves: the group stays while Hca2 is a
member and is gone (ERR_NO_RECORDS) after its last member left; a second
leave is refused.
Through cepd (with CEPD and CEPD_MC): `cepd --fabric 1 --fabric-sa :1` on
Hca2 (its fabric port 0 stands for Hca2's port before the SA) and two
client processes that join one group through it (cepd-mc): one Set from
cepd (both get the MLID, OpenSM has the group), `cepd --stats` counts 2
joins; the first client killed (-9): cepd drops its join and sends no
Delete, the group stays (the other holds it); the second killed: cepd's
Delete, the group is gone; a third joins and leaves; a fourth joins and
cepd is stopped (SIGTERM): its --check finds nothing left and the
group is gone. A PathRecord query through that cepd (from
Hca2's GID to Hca1's, as rdma_resolve_route asks it) must be saquery's,
and so must IPoIB's broadcast group asked through it (an IPoIB id's
Q_Key).
Exit 77 (skip) with the reason when ibsim, OpenSM or saquery is missing.
Usage: ibsim.py SA_IBSIM_BINARY [CEP_STORM CEP_BENCH [CEPD CEPD_MC]]"""
import ipaddress
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

PRELOAD_DIRS = ['/usr/lib/x86_64-linux-gnu/umad2sim', '/usr/lib/umad2sim',
                '/usr/lib64/umad2sim', '/usr/local/lib/umad2sim']
NET = """Switch	8 "Switch1"
[1]	"SmHca"[1]
[2]	"Hca1"[1]
[3]	"Hca2"[1]

Hca	1 "SmHca"
[1]	"Switch1"[1]

Hca	1 "Hca1"
[1]	"Switch1"[2]

Hca	1 "Hca2"
[1]	"Switch1"[3]
"""
PATH_FIELDS = ['service_id', 'dgid', 'sgid', 'dlid', 'slid', 'hop_flow_raw',
               'tclass', 'num_path_revers', 'pkey', 'qos_class', 'sl', 'mtu',
               'rate', 'pkt_life', 'preference']

procs = []
failures = []


def skip(why):
    print(f'SKIP: {why}')
    sys.exit(77)


def cleanup(*_):
    for p in procs:
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGCONT)
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait()
    procs.clear()


def on_signal(signum, _frame):
    cleanup()
    sys.exit(128 + signum)


def wait_for(path, text, timeout, proc):
    """Until the file holds text (True), the process died or time ran out."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            if text in open(path, errors='replace').read():
                return True
        except FileNotFoundError:
            pass
        if proc.poll() is not None:
            return False
        time.sleep(0.2)
    return False


def value(v):
    """saquery's and sa-ibsim's values as one comparable type."""
    v = v.strip()
    if ':' in v:
        return str(ipaddress.IPv6Address(v))
    return int(v, 0)


def parse_saquery(text):
    fields = {}
    for line in text.splitlines():
        m = re.match(r'\s+(\w[\w ]*?)\.{2,}(.*)$', line)
        if m:
            fields[m.group(1).strip()] = m.group(2).strip()
    return fields


def parse_groups(text):
    """saquery -g: {MGID: fields} of each 'group dump'."""
    out = {}
    for block in text.split('MCMemberRecord group dump:')[1:]:
        f = parse_saquery(block)
        if 'MGID' in f:
            out[value(f['MGID'])] = f
    return out


def multicast(run, prog):
    bcast, group = 'ff12:401b:ffff::ffff:ffff', 'ff12:4001:ffff::e001:203'
    rc, ref, err = run(['saquery', '-g'], 'Hca1')
    check(rc == 0, f'saquery -g {err.strip()}')
    groups = parse_groups(ref) if rc == 0 else {}
    rc, out, err = run([prog, 'mcast-get', bcast], 'Hca1')
    check(rc == 0, f'sa-ibsim mcast-get of the broadcast group {out.split()} {err.strip()}')
    got, want = parse_kv(out), groups.get(value(bcast), {})
    for theirs, mine in (('Mlid', 'mlid'), ('Mtu', 'mtu'), ('pkey', 'pkey'),
                         ('Rate', 'rate'), ('SL', 'sl')):
        check(theirs in want and mine in got and value(want[theirs]) == value(got[mine]),
              f'broadcast group {mine}: saquery {want.get(theirs)} libcep {got.get(mine)}')
    joined = {}
    for host in ('Hca1', 'Hca2'):
        rc, out, err = run([prog, 'mcast-join', group, bcast], host)
        check(rc == 0, f'{host} joins {group}: {out.split()} {err.strip()}')
        joined[host] = parse_kv(out)
    mlids = {h: j.get('mlid') for h, j in joined.items()}
    check(len(set(mlids.values())) == 1 and None not in mlids.values(),
          f'both joins got the one MLID: {mlids}')
    rc, ref, err = run(['saquery', '-g'], 'Hca1')
    want = parse_groups(ref).get(value(group), {}) if rc == 0 else {}
    check('Mlid' in want and value(want['Mlid']) == value(mlids['Hca1'] or '-1'),
          f'saquery -g lists {group} with that MLID: {want.get("Mlid")}')
    check(value(want.get('pkey', '-1')) == value(joined['Hca1'].get('pkey', '-2')),
          f'and its P_Key: {want.get("pkey")}')
    rc, out, err = run([prog, 'mcast-leave', group], 'Hca1')
    check(rc == 0, f'Hca1 leaves {err.strip()}')
    rc, out, err = run([prog, 'mcast-get', group], 'Hca1')
    check(rc == 0 and value(parse_kv(out).get('mlid', '-1')) == value(mlids['Hca1'] or '-2'),
          f'the group stays while Hca2 is a member: {out.split()[-2:]} {err.strip()}')
    rc, out, err = run([prog, 'mcast-leave', group], 'Hca2')
    check(rc == 0, f'Hca2 leaves {err.strip()}')
    rc, out, err = run([prog, 'mcast-get', group], 'Hca1')
    check(rc == 1 and 'error -113' in out,
          f'the group is gone after its last member left (ERR_NO_RECORDS): {out.strip()}')
    rc, out, err = run([prog, 'mcast-leave', group], 'Hca2')
    check(rc == 1 and 'error -22' in out, f'a second leave is refused: {out.strip()}')


def stats_joins(cepd, sock, env):
    """cepd --stats: port 0's mc_joins (None when unreadable)."""
    r = subprocess.run([cepd, '--stats', '--socket', sock], env=env, capture_output=True,
                       text=True, timeout=10)
    m = re.search(r'^port 0 .* mc_joins (\d+)', r.stdout, re.M)
    return int(m.group(1)) if m else None


def cepd_multicast(run, start, prog, cepd, cepd_mc, tmp, base, g1, g2):
    """Joins through cepd on Hca2's port, two clients, each killed."""
    group = 'ff12:4001:ffff::e001:204'
    sock = os.path.join(tmp, 'cepd.sock')
    env = dict(base)
    d = start([cepd, '--fabric', '1', '--fabric-sa', ':1', '--socket', sock, '--check'],
              None, 'cepd.log', host='Hca2')
    end = time.monotonic() + 20
    while time.monotonic() < end and not os.path.exists(sock) and d.poll() is None:
        time.sleep(0.1)
    if not os.path.exists(sock):
        check(False, f'cepd --fabric-sa starts: {open(os.path.join(tmp, "cepd.log")).read()}')
        return
    clients = []
    for n in range(2):
        c = subprocess.Popen([cepd_mc, sock, g2, 'hold', group], cwd=tmp, env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             start_new_session=True)
        procs.append(c)
        line = c.stdout.readline().strip()
        check(line.startswith('joined status 0 mlid 0x'),
              f'client {n + 1} joins {group} through cepd: {line!r}')
        clients.append((c, line.split()[-1] if line.startswith('joined') else None))
    mlids = {m for _, m in clients}
    check(len(mlids) == 1 and None not in mlids, f'both got one MLID: {mlids}')
    rc, out, err = run([prog, 'mcast-get', group], 'Hca1')
    got = parse_kv(out).get('mlid', '-1')
    check(rc == 0 and value(got) == value(next(iter(mlids)) or '-2'),
          f'OpenSM has the group with that MLID: {out.split()[-2:]} {err.strip()}')
    check(stats_joins(cepd, sock, env) == 2, 'cepd --stats: 2 joins held')
    # a path query through cepd, as the drop-in's rdma_resolve_route
    r = subprocess.run([cepd_mc, sock, g2, 'path', g1], cwd=tmp, env=env,
                       capture_output=True, text=True, timeout=30)
    rc, ref, err = run(['saquery', '--sgid-to-dgid', f'{g2}-{g1}'], 'Hca2')
    got, want = parse_kv(r.stdout), parse_saquery(ref) if rc == 0 else {}
    check(r.returncode == 0 and rc == 0, f'a path through cepd: {r.stdout.split()} '
          f'{r.stderr.strip()} saquery {err.strip()}')
    for f in ('sgid', 'dgid', 'slid', 'dlid', 'pkey', 'sl', 'mtu', 'rate', 'pkt_life'):
        check(f in got and f in want and value(got[f]) == value(want[f]),
              f'path through cepd: {f} saquery {want.get(f)} cepd {got.get(f)}')
    # IPoIB's broadcast group through cepd (an IPoIB id's Q_Key)
    r = subprocess.run([cepd_mc, sock, g2, 'bcast', '0xffff'], cwd=tmp, env=env,
                       capture_output=True, text=True, timeout=30)
    # (saquery -g shows no Q_Key: the Q_Key as sa-ibsim reads the group
    # from Hca1, the MLID as saquery)
    rc, ref, err = run(['saquery', '-g'], 'Hca2')
    want = parse_groups(ref).get(value('ff12:401b:ffff::ffff:ffff'), {}) if rc == 0 else {}
    rc2, own, err2 = run([prog, 'mcast-get', 'ff12:401b:ffff::ffff:ffff'], 'Hca1')
    got, direct = parse_kv(r.stdout), parse_kv(own)
    check(r.returncode == 0 and rc2 == 0 and 'Mlid' in want and 'qkey' in got and
          value(got['qkey']) == value(direct.get('qkey', '-1')) and
          value(got['mlid']) == value(want['Mlid']),
          f'the broadcast group through cepd: {r.stdout.split()} sa-ibsim qkey '
          f'{direct.get("qkey")}, saquery Mlid {want.get("Mlid")} {r.stderr.strip()} {err2.strip()}')

    def killed(c, left):
        os.killpg(c.pid, signal.SIGKILL)
        c.wait()
        end = time.monotonic() + 10
        while time.monotonic() < end and stats_joins(cepd, sock, env) != left:
            time.sleep(0.1)
        return stats_joins(cepd, sock, env) == left

    check(killed(clients[0][0], 1), 'client 1 killed: cepd holds 1 join')
    rc, out, err = run([prog, 'mcast-get', group], 'Hca1')
    check(rc == 0, f'the group stays, client 2 holds it: {out.strip()} {err.strip()}')
    check(killed(clients[1][0], 0), 'client 2 killed: cepd holds none')
    rc, out, err = run([prog, 'mcast-get', group], 'Hca1')
    check(rc == 1 and 'error -113' in out,
          f'cepd left the group for its dead clients (ERR_NO_RECORDS): {out.strip()}')
    r = subprocess.run([cepd_mc, sock, g2, 'join-leave', group], cwd=tmp, env=env,
                       capture_output=True, text=True, timeout=30)
    check(r.returncode == 0 and 'left 0' in r.stdout,
          f'a third client joins and leaves: {r.stdout.split()} {r.stderr.strip()}')
    rc, out, err = run([prog, 'mcast-get', group], 'Hca1')
    check(rc == 1 and 'error -113' in out, f'and the group is gone again: {out.strip()}')
    # cepd stopped while a client holds a join: the join ends with it
    c = subprocess.Popen([cepd_mc, sock, g2, 'hold', group], cwd=tmp, env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         start_new_session=True)
    procs.append(c)
    line = c.stdout.readline().strip()
    check(line.startswith('joined status 0'), f'a fourth client joins: {line!r}')
    d.send_signal(signal.SIGTERM)
    try:
        d.wait(timeout=20)
    except subprocess.TimeoutExpired:
        pass
    log = open(os.path.join(tmp, 'cepd.log'), errors='replace').read()
    check(d.returncode == 0 and 'tables consistent and empty' in log,
          f'cepd stops with nothing left (--check): exit {d.returncode} {log.strip()[-300:]}')
    rc, out, err = run([prog, 'mcast-get', group], 'Hca1')
    check(rc == 1 and 'error -113' in out,
          f'cepd stopped: the join its client held has ended: {out.strip()}')
    os.killpg(c.pid, signal.SIGKILL)
    c.wait()


def parse_kv(text):
    return dict(l.split(None, 1) for l in text.splitlines() if ' ' in l)


def check(cond, what):
    print(('ok   ' if cond else 'FAIL ') + what)
    if not cond:
        failures.append(what)


def storms(run, storm, bench, l1, l2, g1, g2):
    """cep-storm / cep-bench connect --sa on Hca1 towards Hca2."""
    rc, ref, err = run(['saquery', '--src-to-dst', f'{l1}:{l2}'], 'Hca1')
    if rc != 0:
        check(False, f'saquery for the storm path: {err.strip()}')
        return
    want = parse_saquery(ref)
    plt = value(want['pkt_life']) & 0x3f
    mtu = value(want['mtu']) & 0x3f
    pkey = value(want['pkey'])
    # cep_qp_ack_timeout(0, plt): 2 x life time, the fabric's ACK delay 0
    ack = min(31, plt + 1 + (1 if 0 + 1 >= plt + 1 else 0))
    for dest, how in ((l2, 'LID'), (g2, 'GID')):
        rc, out, err = run([storm, '--count', '200', '--workers', '1', '--window', '32',
                            '--sa', ':1', '--sa-dest', dest], 'Hca1', timeout=180)
        line = next((x for x in out.splitlines() if 'path from the SA' in x), '')
        m = re.search(r'SLID (\d+) DLID (\d+) SGID (\S+) DGID (\S+) P_Key (\S+) SL \d+ '
                      r'MTU (\d+) rate \d+ packet life time (\d+)', line)
        check(m is not None, f'cep-storm --sa-dest {how}: prints its path: {line!r} {err.strip()}')
        if m:
            check(int(m[1]) == int(l1) and int(m[2]) == int(l2) and
                  value(m[3]) == value(g1) and value(m[4]) == value(g2),
                  f'cep-storm --sa-dest {how}: the path leads from Hca1 to Hca2: {line}')
            check(int(m[5], 16) == pkey and int(m[6]) == mtu and int(m[7]) == plt,
                  f'cep-storm --sa-dest {how}: P_Key, MTU, packet life time as saquery '
                  f'(0x{pkey:x} {mtu} {plt}): {line}')
        check(f"REQs on the SA's path:   200 of 200 (local ACK timeout {ack} from packet "
              f"life time {plt})" in out,
              f'cep-storm --sa-dest {how}: all 200 REQs carry the path, ACK timeout {ack}')
        check(rc == 0 and 'result: PASS' in out,
              f'cep-storm --sa-dest {how}: exit {rc}, '
              f'{[x for x in out.splitlines() if "FAIL" in x or "established" in x]} {err.strip()[-300:]}')
    rc, out, err = run([bench, 'connect', '--quick', '--impl', 'libcep-ck', '--threads', '1',
                        '--conns', '200', '--json', '--sa', ':1', '--sa-dest', str(l2)],
                       'Hca1', timeout=180)
    line = next((x for x in err.splitlines() if 'path from the SA' in x), '')
    check(rc == 0 and '"bench": "connect"' in out and f'SLID {l1} DLID {l2}' in line and
          f'packet life time {plt}' in line,
          f'cep-bench connect --sa: exit {rc}, path {line!r}, {out.strip()[:200]} {err.strip()[-300:]}')


def main():
    if len(sys.argv) not in (2, 4, 6):
        print(__doc__)
        return 2
    prog = os.path.abspath(sys.argv[1])
    storm, bench = (os.path.abspath(a) for a in sys.argv[2:4]) if len(sys.argv) >= 4 \
        else (None, None)
    cepd, cepd_mc = (os.path.abspath(a) for a in sys.argv[4:6]) if len(sys.argv) == 6 \
        else (None, None)
    for tool, pkg in (('ibsim', 'ibsim-utils'), ('opensm', 'opensm'),
                      ('saquery', 'infiniband-diags')):
        if not shutil.which(tool):
            skip(f'{tool} not installed (Debian package {pkg}; scripts/deps.sh installs it)')
    preload = next((os.path.join(d, 'libumad2sim.so') for d in PRELOAD_DIRS
                    if os.path.exists(os.path.join(d, 'libumad2sim.so'))), None)
    if not preload:
        skip('libumad2sim.so not found (Debian package ibsim-utils)')

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    tmp = tempfile.mkdtemp(prefix='cep-ibsim-')
    # A socket name of our own: other ibsim instances on the host stay apart.
    base = dict(os.environ, IBSIM_SOCKNAME=f'cep{os.getpid()}')
    base.pop('LD_PRELOAD', None)
    sim_env = dict(base, LD_PRELOAD=preload)
    # Sanitizer builds: libumad2sim.so (ibsim's preload, not libcep) has
    # its own faults - it starts a thread before initialising the mutex
    # that thread takes (TSan), and its read() copies 320 bytes out of a
    # 288-byte buffer for some answers (ASan). Ignore what its own code
    # does, here only; libcep's code stays fully checked.
    if 'TSAN_OPTIONS' in base:
        supp = os.path.join(tmp, 'tsan.supp')
        m = re.search(r'suppressions=([^:]+)', base['TSAN_OPTIONS'])
        text = open(m.group(1)).read() if m and os.path.exists(m.group(1)) else ''
        open(supp, 'w').write(text + '\ncalled_from_lib:libumad2sim.so\nrace:libumad2sim.so\n')
        sim_env['TSAN_OPTIONS'] = re.sub(r'suppressions=[^:]+', '', base['TSAN_OPTIONS']) + \
            ':suppressions=' + supp
    if 'ASAN_OPTIONS' in base:
        supp = os.path.join(tmp, 'asan.supp')
        open(supp, 'w').write('interceptor_via_lib:libumad2sim.so\n')
        sim_env['ASAN_OPTIONS'] = base['ASAN_OPTIONS'] + ':suppressions=' + supp
    open(os.path.join(tmp, 'net'), 'w').write(NET)

    def start(args, env, log, host=None):
        if host:
            env = dict(sim_env, SIM_HOST=host)
        p = subprocess.Popen(args, cwd=tmp, env=env, stdin=subprocess.DEVNULL,
                             stdout=open(os.path.join(tmp, log), 'w'),
                             stderr=subprocess.STDOUT, start_new_session=True)
        procs.append(p)
        return p

    def run(args, host, timeout=30):
        env = dict(sim_env, SIM_HOST=host)
        try:
            r = subprocess.run(args, cwd=tmp, env=env, capture_output=True,
                               text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return None, '', f'timed out after {timeout} s'
        return r.returncode, r.stdout, r.stderr

    try:
        sim = start(['ibsim', '-s', '-n', 'net'], base, 'ibsim.log')
        if not wait_for(os.path.join(tmp, 'ibsim.log'), 'simulator ready', 20, sim):
            print(open(os.path.join(tmp, 'ibsim.log')).read())
            check(False, 'ibsim starts')
            return 1
        osm_log = os.path.join(tmp, 'osm.log')
        # -d2: flush the log at each line, so SUBNET UP is seen when it happens.
        osm = start(['opensm', '-d2', '-f', osm_log],
                    dict(sim_env, SIM_HOST='SmHca', OSM_TMP_DIR=tmp, OSM_CACHE_DIR=tmp),
                    'opensm.out')
        if not wait_for(osm_log, 'SUBNET UP', 90, osm):
            print(open(os.path.join(tmp, 'opensm.out')).read())
            check(False, 'OpenSM reports SUBNET UP within 90 s')
            return 1
        check(True, 'OpenSM reports SUBNET UP')

        ports = {}
        for host in ('Hca1', 'Hca2'):
            rc, out, err = run([prog, 'port'], host)
            check(rc == 0, f'sa-ibsim port on {host}: {out.split()} {err.strip()}')
            if rc != 0:
                return 1
            ports[host] = parse_kv(out)
        l1, l2 = ports['Hca1']['lid'], ports['Hca2']['lid']
        g1, g2 = ports['Hca1']['gid'], ports['Hca2']['gid']
        sm = ports['Hca1']['sm_lid']
        check(l1 != l2 and sm not in (l1, l2), f'LIDs {l1}, {l2}, SM LID {sm}')

        def compare(what, ref_args, our_args):
            rc, ref, err = run(['saquery'] + ref_args, 'Hca1')
            if rc != 0:
                check(False, f'saquery {" ".join(ref_args)}: {err.strip()}')
                return
            rc, ours, err = run([prog] + our_args, 'Hca1')
            check(rc == 0, f'sa-ibsim {" ".join(our_args)} exits 0 {err.strip()}')
            want, got = parse_saquery(ref), parse_kv(ours)
            for f in PATH_FIELDS:
                if f not in want or f not in got:
                    check(False, f'{what}: {f} in both answers')
                    continue
                check(value(want[f]) == value(got[f]),
                      f'{what}: {f} saquery {want[f]} libcep {got[f]}')
            return got

        got = compare('by LIDs', ['--src-to-dst', f'{l1}:{l2}'], ['path-lid', l1, l2])
        if got:
            check(int(got['dlid']) == int(l2) and value(got['dgid']) == value(g2),
                  'the path by LIDs leads to Hca2')
        got = compare('by GIDs', ['--sgid-to-dgid', f'{g1}-{g2}'], ['path-gid', g1, g2])
        if got:
            check(int(got['slid']) == int(l1) and int(got['dlid']) == int(l2),
                  'the path by GIDs has Hca1 and Hca2 LIDs')

        if storm:
            storms(run, storm, bench, l1, l2, g1, g2)

        rc, ref, err = run(['saquery', '-c'], 'Hca1')
        rc2, ours, err2 = run([prog, 'cpi'], 'Hca1')
        check(rc == 0 and rc2 == 0, f'ClassPortInfo from both {err.strip()} {err2.strip()}')
        if rc == 0 and rc2 == 0:
            want, got = parse_saquery(ref), parse_kv(ours)
            for theirs, mine in (('Base version', 'base_version'),
                                 ('Class version', 'class_version'),
                                 ('Capability mask', 'capability_mask'),
                                 ('Capability mask 2', 'capability_mask2'),
                                 ('Response time value', 'resp_time_value'),
                                 ('Redirect LID', 'redirect_lid'),
                                 ('Redirect QP', 'redirect_qp'),
                                 ('Redirect QKey', 'redirect_qkey')):
                check(theirs in want and value(want[theirs]) == value(got.get(mine, '-1')),
                      f'ClassPortInfo {mine}: saquery {want.get(theirs)} libcep {got.get(mine)}')

        multicast(run, prog)
        if cepd:
            cepd_multicast(run, start, prog, cepd, cepd_mc, tmp, base, g1, g2)

        # No such LID: the SA answers with an error or not at all; either
        # way the query ends within its bound (300 ms x 2, + 5 s on a loaded host).
        rc, out, err = run([prog, 'fail', l1, '0xbeef', '300', '2'], 'Hca1', timeout=20)
        check(rc == 0, f'query to a LID that does not exist ends in an error in time: {out.split()} {err.strip()}')

        # OpenSM stopped: no answer, -ETIMEDOUT after exactly 3 sends.
        os.killpg(osm.pid, signal.SIGSTOP)
        try:
            rc, out, err = run([prog, 'timeout', l1, l2, '300', '3'], 'Hca1', timeout=20)
            check(rc == 0, f'query while OpenSM is stopped: -ETIMEDOUT after 3 x 300 ms: {out.split()} {err.strip()}')
        finally:
            os.killpg(osm.pid, signal.SIGCONT)
        # OpenSM now answers the 3 stale queries. A client that attaches
        # to Hca1 while they arrive is killed by libumad2sim.so (SIGSEGV in
        # its receive thread: a MAD before the class is registered), so
        # wait until ibsim has dropped all three ("no one to handle").
        sim_log = os.path.join(tmp, 'ibsim.log')
        end = time.monotonic() + 20
        while time.monotonic() < end and \
                open(sim_log, errors='replace').read().count('no one to handle pkt: class 0x3') < 3:
            time.sleep(0.1)
        print(f'stale answers dropped by ibsim after {20 - (end - time.monotonic()):.1f} s')
        rc, out, err = run([prog, 'path-lid', l1, l2], 'Hca1')
        check(rc == 0, f'OpenSM resumed: queries answered again: rc {rc} {out.split()} {err.strip()}')
        print('not tested here: invalidation on an SM change (an ibsim client reads its '
              'SM LID once, at start; tests/sa covers it with a fake SA)')
    finally:
        cleanup()
        if failures:
            print(f'logs kept in {tmp}')
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    print(f'{len(failures)} failure(s)')
    return 1 if failures else 0


if __name__ == '__main__':
    sys.exit(main())
