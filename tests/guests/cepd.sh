#!/bin/sh
# SPDX-License-Identifier: MIT
# Guest script: cepd, one CM for the node (issue 18), with Debian's
# rdmacm-utils programs, unmodified, on libcep's librdmacm.so.1. Guest b
# runs cepd on rxe0 port 1 and three servers at once through it (two
# rping servers, one ucmatose: more processes than one port's CM class
# could hold without cepd); guest a runs their clients on libcep in
# process. Then the kill: a long rping through cepd on b is killed with
# SIGKILL, and its client on a must end at once (cepd sends the DREQ),
# not after its own timeouts; cepd's statistics show no client left.
# Args: cep-rdmacm wrapper, cepd. Exit 0 when every check passed.
set -u
. "$GB_LIB"
wrap=$1
cepd=$2
out=/tmp/cepd-test
mkdir -p $out
pass=0
fail=0

ok() { echo "PASS $*"; pass=$((pass + 1)); }
ko() { echo "FAIL $*"; fail=$((fail + 1)); }

gb_rxe_up || exit 1
echo "rxe0 up (no ib_cm): gid[1] $(gb_gid 1)"
gb_signal up
gb_wait up 120 || exit 1

if [ "$GB_NAME" = b ]; then
	sock=/tmp/cepd.sock
	$cepd --port rxe0:1 --socket $sock -v >$out/cepd.out 2>&1 &
	cepd_pid=$!
	i=0
	until $cepd --stats --socket $sock >/dev/null 2>&1; do
		i=$((i + 1))
		[ $i -gt 500 ] && { cat $out/cepd.out; ko "cepd did not start"; exit 1; }
		sleep 0.02
	done
	echo "cepd serves rxe0:1 on $sock"
	export CEP_SERVICE=$sock
	# three servers at once on one port, each its own process
	for s in "rping 7174" "rping 7175" "ucmatose 7471"; do
		set -- $s
		case $1 in
		rping) cmd="rping -s -a $GB_IP -p $2 -v -C 5";;
		ucmatose) cmd="ucmatose -c 4";;
		esac
		rm -f $out/ready.$2
		CEP_RDMACM_READY=$out/ready.$2 timeout 200 $wrap $cmd >$out/server.$2 2>&1 &
		eval "pid_$2=$!"
	done
	for p in 7174 7175 7471; do
		i=0
		until [ -e $out/ready.$p ]; do
			i=$((i + 1))
			[ $i -gt 3000 ] && break
			sleep 0.02
		done
	done
	$cepd --stats --socket $sock
	clients=$($cepd --stats --socket $sock | sed -n 's/^clients \([0-9]*\) .*/\1/p')
	[ "$clients" = 3 ] && ok "three servers share rxe0:1 through cepd" ||
		ko "cepd has $clients clients, not 3"
	gb_signal servers
	gb_wait clients-done 300 || true
	for p in 7174 7175 7471; do
		eval "wait \$pid_$p"
		rc=$?
		cat $out/server.$p
		case $p in
		7471) n=$(grep -c '^data transfers complete' $out/server.$p);;
		*) n=$(grep -c '^server ping data: rdma-ping-' $out/server.$p)
		   [ "$n" = 5 ] && n=1;;
		esac
		[ $rc = 0 ] && [ "$n" = 1 ] && ok "server on port $p (exit $rc)" ||
			ko "server on port $p (exit $rc)"
	done

	# kill -9 of a server with a live connection
	rm -f $out/ready.7180
	CEP_RDMACM_READY=$out/ready.7180 $wrap rping -s -a $GB_IP -p 7180 -v -C 100000 \
		>$out/server.7180 2>&1 &
	victim=$!
	i=0
	until [ -e $out/ready.7180 ] || [ $i -gt 3000 ]; do i=$((i + 1)); sleep 0.02; done
	gb_signal victim-ready
	gb_wait victim-connected 120 || true
	sleep 1
	kill -9 $victim
	wait $victim 2>/dev/null
	echo "rping server $victim killed"
	gb_signal victim-killed
	gb_wait victim-client-done 120 || true
	i=0
	until $cepd --stats --socket $sock | grep -q '^clients 0 '; do
		i=$((i + 1))
		[ $i -gt 200 ] && break
		sleep 0.02
	done
	$cepd --stats --socket $sock
	$cepd --stats --socket $sock | grep -q '^clients 0 ' &&
		ok "the killed server's client is gone from cepd" || ko "cepd still lists a client"
	kill $cepd_pid
	wait $cepd_pid
	rc=$?
	cat $out/cepd.out
	[ $rc = 0 ] && ok "cepd stopped cleanly" || ko "cepd exit $rc"
else
	gb_wait servers 300 || exit 1
	# no cepd on a: each client owns the port's CM while it runs, so one
	# after another
	timeout 100 $wrap rping -c -a $GB_PEER_IP -p 7174 -v -C 5 >$out/client.7174 2>&1
	r1=$?
	timeout 100 $wrap rping -c -a $GB_PEER_IP -p 7175 -v -C 5 >$out/client.7175 2>&1
	r2=$?
	timeout 100 $wrap ucmatose -s $GB_PEER_IP -c 4 >$out/client.7471 2>&1
	r3=$?
	for p in 7174 7175 7471; do cat $out/client.$p; done
	[ $r1 = 0 ] && [ "$(grep -c '^ping data: rdma-ping-' $out/client.7174)" = 5 ] &&
		ok "rping client to 7174" || ko "rping client to 7174 (exit $r1)"
	[ $r2 = 0 ] && [ "$(grep -c '^ping data: rdma-ping-' $out/client.7175)" = 5 ] &&
		ok "rping client to 7175" || ko "rping client to 7175 (exit $r2)"
	[ $r3 = 0 ] && [ "$(grep -c '^data transfers complete' $out/client.7471)" = 1 ] &&
		ok "ucmatose client" || ko "ucmatose client (exit $r3)"
	gb_signal clients-done

	gb_wait victim-ready 120 || exit 1
	$wrap rping -c -a $GB_PEER_IP -p 7180 -C 100000 >$out/client.7180 2>&1 &
	victim_client=$!
	sleep 2
	gb_signal victim-connected
	gb_wait victim-killed 120 || true
	t0=$(date +%s)
	i=0
	while kill -0 $victim_client 2>/dev/null && [ $i -lt 1500 ]; do i=$((i + 1)); sleep 0.02; done
	t=$(( $(date +%s) - t0 ))
	if kill -0 $victim_client 2>/dev/null; then
		kill $victim_client
		ko "the client of the killed server still runs after 30 s"
	else
		ok "the client of the killed server ended ${t} s after the kill"
	fi
	tail -5 $out/client.7180
	gb_signal victim-client-done
fi
echo "cepd: $pass passed, $fail failed"
[ $fail = 0 ]
