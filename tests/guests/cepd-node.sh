#!/bin/sh
# SPDX-License-Identifier: MIT
# Guest script (guests-cepd-node): cepd, one CM per node (issue 18, cepd(8)), on Soft-RoCE.
# Guest b runs one cepd for rxe0:1 and, through it, three unmodified
# rdmacm-utils servers at once (rping -P, ucmatose, cmtime) on libcep's
# librdmacm.so.1; guest a connects to all three at once:
#   libcep   a's clients on libcep, through a cepd of its own (the three
#            programs at once through one cepd)
#   kernel   a's cepd stopped, the kernel CM loaded: the same clients on
#            Debian's librdmacm and the kernel's rdma_cm
#   kill     b's cepd-guest kill-server (one connection established, one
#            request unanswered) killed with -9: a's kernel peer must see
#            DISCONNECTED and REJECTED within LIMIT ms, and cepd's tables
#            must lose every trace of the dead client
# Meanwhile on b: a second `rping -s` on rping's port gets EADDRINUSE from
# rdma_listen, and cepd-guest hostile (raw protocol: foreign QPNs, handles
# and service IDs, malformed requests, a flood) runs during the libcep
# phase, while the servers keep serving.
#   mcast    multicast through cepd's port (RoCE: the joins need neither
#            CM nor cepd): on b two rdmacm-probe mcast-recv members and an
#            mckey receiver, three processes; the mckey one is killed with
#            -9 and its IP membership must go (/proc/net/igmp users 3 -> 2);
#            a (kernel CM) sends 10 datagrams, each member checks all 10
# Args: cep-rdmacm wrapper, cepd, cepd-guest, [cmtime connections], [LIMIT ms],
# [rdmacm-probe].
set -u
. "$GB_LIB"
wrap=$1
cepd=$2
probe=$3
cmtime_n=${4:-100}
limit=${5:-4000}
mcprobe=${6:-}
ulimit -n 65536 2>/dev/null || true
out=/tmp/cepd
mkdir -p $out /run/cep
sock=/run/cep/cepd.sock
pass=0
fail=0
ok() { echo "PASS $*"; pass=$((pass + 1)); }
ko() { echo "FAIL $*"; fail=$((fail + 1)); }
n() { grep -c "$1" "$2"; }

gb_rxe_up || exit 1
echo "rxe0 up (no ib_cm): gid[1] $(gb_gid 1)"

# start_cepd: cepd on rxe0:1 at the default socket; wait until it answers.
start_cepd() {
	gb_start_cepd 500 $out/cepd.$1.log "$cepd" --port rxe0:1 || exit 1
	echo "cepd $cepd_pid serves rxe0:1 at $sock"
}

# stop_cepd LABEL: SIGTERM; it must exit 0.
stop_cepd() {
	kill -TERM $cepd_pid
	wait $cepd_pid
	rc=$?
	[ $rc = 0 ] && [ ! -e $sock ] && ok "cepd ($1) stops on SIGTERM, socket removed" ||
		ko "cepd ($1) exit $rc on SIGTERM"
	echo "-- cepd ($1) log:"; cat $out/cepd.$1.log
}

# clients_total: the service's count of clients ever attached.
clients_total() { "$cepd" --stats | sed -n 's/^clients [0-9]* total \([0-9]*\) .*/\1/p'; }

# wait_pids SECONDS PID...: wait for each; one still running at the
# deadline gets its threads' stacks printed (gdb) and is killed. Sets rcs
# to their exit codes (124 for a killed one).
wait_pids() {
	end=$(( $(date +%s) + $1 )); shift
	rcs=
	for p in "$@"; do
		while kill -0 $p 2>/dev/null && [ "$(date +%s)" -lt $end ]; do sleep 0.1; done
		if kill -0 $p 2>/dev/null; then
			echo "-- process $p ($(tr '\0' ' ' </proc/$p/cmdline)) hangs:"
			[ -e $sock ] && "$cepd" --stats
			command -v gdb >/dev/null &&
				timeout 60 gdb -p $p -batch -ex "thread apply all bt" 2>&1 | grep -v "^\[New LWP"
			kill -9 $p
			wait $p
			rcs="$rcs 124"
		else
			wait $p
			rcs="$rcs $?"
		fi
	done
}

# run_clients PHASE [WRAPPER]: the three clients at once; each judged by
# its own output and status.
run_clients() {
	phase=$1 w=${2:-}
	$w stdbuf -oL rping -c -a $GB_PEER_IP -v -C 5 >$out/$phase-rping.out 2>&1 &
	p1=$!
	$w stdbuf -oL ucmatose -s $GB_PEER_IP -c 2 >$out/$phase-ucmatose.out 2>&1 &
	p2=$!
	$w stdbuf -oL cmtime -s $GB_PEER_IP -p 7472 -c $cmtime_n >$out/$phase-cmtime.out 2>&1 &
	p3=$!
	wait_pids 200 $p1 $p2 $p3
	set -- $rcs
	r1=$1 r2=$2 r3=$3
	for f in rping ucmatose cmtime; do echo "-- $phase client $f:"; cat $out/$phase-$f.out; done
	[ $r1 = 0 ] && [ "$(n '^ping data: rdma-ping-' $out/$phase-rping.out)" = 5 ] &&
		ok "$phase: rping client" || ko "$phase: rping client (exit $r1)"
	[ $r2 = 0 ] && [ "$(n '^data transfers complete' $out/$phase-ucmatose.out)" = 1 ] &&
		[ "$(n '^return status 0$' $out/$phase-ucmatose.out)" = 1 ] &&
		ok "$phase: ucmatose client" || ko "$phase: ucmatose client (exit $r2)"
	[ $r3 = 0 ] && [ "$(n '^connect *:' $out/$phase-cmtime.out)" = 1 ] &&
		[ "$(n '^disconnect *:' $out/$phase-cmtime.out)" = 1 ] &&
		[ "$(n 'error\|failure\|failing' $out/$phase-cmtime.out)" = 0 ] &&
		ok "$phase: cmtime client ($cmtime_n connections)" || ko "$phase: cmtime client (exit $r3)"
}

# start_ucmatose PHASE: ucmatose's server takes one client run, then exits.
start_ucmatose() {
	rm -f $out/ucmatose.ready
	CEP_RDMACM_READY=$out/ucmatose.ready timeout 300 $wrap ucmatose -c 2 \
		>$out/$1-ucmatose-server.out 2>&1 &
	ucm_pid=$!
	while [ ! -e $out/ucmatose.ready ] && kill -0 $ucm_pid 2>/dev/null; do sleep 0.02; done
}

check_ucmatose() {
	wait $ucm_pid
	rc=$?
	echo "-- $1 server ucmatose:"; cat $out/$1-ucmatose-server.out
	[ $rc = 0 ] && [ "$(n '^data transfers complete' $out/$1-ucmatose-server.out)" = 1 ] &&
		ok "$1: ucmatose server through cepd" || ko "$1: ucmatose server (exit $rc)"
}

# mc_users: eth0's users of group 239.1.1.8 (/proc/net/igmp prints the
# address as the host reads the word: 080101EF on x86), 0 when none.
mc_users() {
	awk '/^[0-9]/ { dev = $2 } dev == "eth0" && $1 == "080101EF" { print $2; f = 1 }
		END { if (!f) print 0 }' /proc/net/igmp
}

# mcast_b: three members of 239.1.1.8 through cepd's port, one killed.
mcast_b() {
	echo "== mcast: three members on b, one killed with -9"
	for m in 1 2; do
		$wrap "$mcprobe" $GB_IP $GB_PEER_IP mcast-recv >$out/mc-recv$m.out 2>&1 &
		eval mc$m=\$!
	done
	$wrap stdbuf -oL mckey -m 239.1.1.8 -b $GB_IP -C 1000 >$out/mc-victim.out 2>&1 &
	victim=$!
	end=$(( $(date +%s) + 60 ))
	until { grep -q '^receiver: joined$' $out/mc-recv1.out &&
		grep -q '^receiver: joined$' $out/mc-recv2.out &&
		grep -q '^mckey: joined dgid' $out/mc-victim.out; } ||
		[ "$(date +%s)" -ge $end ]; do sleep 0.05; done
	u3=$(mc_users)
	kill -9 $victim
	wait $victim
	end=$(( $(date +%s) + 10 ))
	while [ "$(mc_users)" != 2 ] && [ "$(date +%s)" -lt $end ]; do sleep 0.05; done
	u2=$(mc_users)
	cat $out/mc-victim.out
	[ "$u3" = 3 ] && [ "$u2" = 2 ] &&
		ok "mcast: three members' IP memberships, the killed one's released (users $u3 -> $u2)" ||
		ko "mcast: IP memberships $u3 with three members, $u2 after the kill (want 3, 2)"
	gb_signal mc-ready
	wait_pids 60 $mc1 $mc2
	set -- $rcs
	for m in 1 2; do
		echo "-- member $m:"; cat $out/mc-recv$m.out
		eval rc=\$$m
		[ "$rc" = 0 ] && grep -q '^receiver: ok$' $out/mc-recv$m.out &&
			ok "mcast: member $m through cepd's port took all 10 datagrams, checked" ||
			ko "mcast: member $m (exit $rc)"
	done
	[ "$(mc_users)" = 0 ] && ok "mcast: no membership left after the leaves" ||
		ko "mcast: $(mc_users) memberships left"
	gb_signal mc-done
}

# ids_of_port, qps_of_port: the live ids, the registered QPNs of cepd's port 0.
ids_of_port() { "$cepd" --stats | sed -n 's/^port 0 .* ids \([0-9]*\).*/\1/p'; }
qps_of_port() { "$cepd" --stats | sed -n 's/^port 0 .* qps \([0-9]*\).*/\1/p'; }

if [ "$GB_NAME" = b ]; then
	start_cepd b
	# three servers at once, each a process of its own on cepd's port
	# (stdbuf: their output survives the SIGTERM that ends them)
	CEP_RDMACM_READY=$out/rping.ready timeout 600 $wrap stdbuf -oL rping -s -P -a $GB_IP -v \
		>$out/rping-server.out 2>&1 &
	rping_pid=$!
	CEP_RDMACM_READY=$out/cmtime.ready timeout 600 $wrap stdbuf -oL cmtime -p 7472 \
		>$out/cmtime-server.out 2>&1 &
	cmtime_pid=$!
	start_ucmatose libcep
	for f in rping cmtime; do
		i=0
		while [ ! -e $out/$f.ready ] && [ $i -lt 1500 ]; do sleep 0.02; i=$((i + 1)); done
	done
	"$cepd" --stats
	nc=$("$cepd" --stats | sed -n 's/^clients \([0-9]*\) .*/\1/p')
	[ -e $out/rping.ready ] && [ -e $out/cmtime.ready ] && [ -e $out/ucmatose.ready ] &&
		[ "$nc" = 3 ] && ok "three servers listen through one cepd (3 clients)" ||
		ko "three servers through one cepd ($nc clients)"
	# a second listener on rping's port, in another process: EADDRINUSE
	timeout 60 $wrap rping -s -a $GB_IP -v -C 1 >$out/busy.out 2>&1
	rc=$?
	cat $out/busy.out
	[ $rc != 0 ] && grep -q "^rdma_listen: Address already in use" $out/busy.out &&
		ok "a second rdma_listen on port 7174: EADDRINUSE (exit $rc)" ||
		ko "a second rdma_listen on port 7174 (exit $rc)"
	# the hostile client, flooding while a's clients run
	timeout 240 "$probe" hostile $sock rxe0 1 0x1061c06 15 >$out/hostile.out 2>&1 &
	hostile_pid=$!
	gb_signal servers-libcep
	gb_wait done-libcep 400 || ko "libcep phase: a did not finish"
	check_ucmatose libcep
	wait $hostile_pid
	rc=$?
	echo "-- hostile:"; cat $out/hostile.out
	[ $rc = 0 ] && ok "hostile client refused, others unaffected" || ko "hostile (exit $rc)"
	start_ucmatose kernel
	gb_signal servers-kernel
	gb_wait done-kernel 400 || ko "kernel phase: a did not finish"
	check_ucmatose kernel
	kill $rping_pid $cmtime_pid
	wait $rping_pid $cmtime_pid
	echo "-- server rping (persistent):"; cat $out/rping-server.out
	echo "-- server cmtime:"; cat $out/cmtime-server.out
	[ "$(n '^server ping data: rdma-ping-' $out/rping-server.out)" = 10 ] &&
		ok "rping server through cepd: 10 pings from 2 clients" || ko "rping server"
	[ "$(n 'error\|failure\|failing' $out/cmtime-server.out)" = 0 ] &&
		ok "cmtime server through cepd" || ko "cmtime server"
	[ -n "$mcprobe" ] && mcast_b

	echo "== kill"
	end=$(( $(date +%s) + 30 ))
	while [ "$(ids_of_port)" != 0 ] && [ "$(date +%s)" -lt $end ]; do sleep 0.05; done
	base=$(ids_of_port)
	base_qps=$(qps_of_port)
	echo "ids on the port before: $base, QPNs $base_qps"
	rm -f $out/ks.ready $out/ks.listen
	# no timeout(1) in between: $ks is the server itself (the wrapper execs)
	CEP_RDMACM_READY=$out/ks.listen $wrap "$probe" kill-server $GB_IP 7480 \
		$out/ks.ready >$out/kill-server.out 2>&1 &
	ks=$!
	i=0
	while [ ! -e $out/ks.listen ] && kill -0 $ks 2>/dev/null && [ $i -lt 3000 ]; do
		sleep 0.02; i=$((i + 1))
	done
	gb_signal ks-listen
	i=0
	while [ ! -e $out/ks.ready ] && kill -0 $ks 2>/dev/null && [ $i -lt 6000 ]; do
		sleep 0.02; i=$((i + 1))
	done
	gb_wait kc-ready 120 || true
	"$cepd" --stats
	gb_signal killing  # a's clock starts: the kill comes 1 s later
	sleep 1
	kill -9 $ks
	wait $ks
	cat $out/kill-server.out
	# the service ends the dead client: its line goes, its ids with it
	t0=$(date +%s.%N)
	end=$(( $(date +%s) + 30 ))
	gone=0
	while [ "$(date +%s)" -lt $end ]; do
		s=$("$cepd" --stats)
		if ! echo "$s" | grep -q " pid $ks " && [ "$(ids_of_port)" -le "$base" ] &&
			[ "$(qps_of_port)" -le "$base_qps" ]; then
			gone=1
			break
		fi
		sleep 0.05
	done
	"$cepd" --stats
	if [ $gone = 1 ]; then
		ok "kill -9: the dead client, its ids and its QP gone from cepd in $(awk "BEGIN { printf \"%.2f\", $(date +%s.%N) - $t0 }") s"
	else
		ko "kill -9: cepd keeps the dead client's state after 30 s"
	fi
	gb_wait kill-done 120 || true
	stop_cepd b
else
	start_cepd a
	echo "== libcep: three clients at once through a's cepd"
	gb_wait servers-libcep 300 || { ko "no servers"; exit 1; }
	run_clients libcep "$wrap"
	t=$(clients_total)
	[ "${t:-0}" -ge 3 ] && ok "the clients went through a's cepd ($t clients)" ||
		ko "a's cepd saw ${t:-no} clients"
	gb_signal done-libcep
	stop_cepd a
	echo "== kernel: the same clients on the kernel's rdma_cm"
	modprobe -a ib_cm iw_cm rdma_cm rdma_ucm || { ko "modprobe kernel CM"; exit 1; }
	gb_wait servers-kernel 300 || { ko "no servers"; exit 1; }
	run_clients kernel
	gb_signal done-kernel
	if [ -n "$mcprobe" ]; then
		echo "== mcast: a's sender (kernel CM) to b's members"
		if gb_wait mc-ready 200; then
			timeout 60 "$mcprobe" $GB_IP $GB_PEER_IP mcast-send >$out/mc-send.out 2>&1
			rc=$?
			cat $out/mc-send.out
			[ $rc = 0 ] && grep -q '^sender: ok$' $out/mc-send.out &&
				ok "mcast: 10 datagrams sent to the group" || ko "mcast: sender (exit $rc)"
		else
			ko "mcast: b's members did not join"
		fi
		gb_wait mc-done 120 || true
	fi
	echo "== kill: a kernel peer of a server killed with -9"
	gb_wait ks-listen 300 || { ko "no kill-server"; exit 1; }
	timeout 250 "$probe" kill-client $GB_PEER_IP 7480 "$GB_SHARE/a.kc-ready" \
		"$GB_SHARE/b.killing" "$limit" >$out/kill-client.out 2>&1
	rc=$?
	cat $out/kill-client.out
	grep -q "^PASS kill-client: DISCONNECTED" $out/kill-client.out &&
		grep -q "^PASS kill-client: REJECTED" $out/kill-client.out &&
		ok "kill -9: the kernel peer learnt at once" || ko "kill -9: the kernel peer (exit $rc)"
	gb_signal kill-done
fi
rdma statistic show link rxe0/1 2>/dev/null || true
echo "cepd: $pass passed, $fail failed"
[ $fail = 0 ] && [ $pass -gt 0 ]
