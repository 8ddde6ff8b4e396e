#!/bin/sh
# SPDX-License-Identifier: MIT
# Guest script: stream rsockets through cepd, the node's CM (cepd(8)), on
# both guests: each runs `cepd --port rxe0:1` and the programs reach it
# through libcep's librdmacm (cep-rdmacm). b serves, a connects:
# rsocket-duplex (8 MiB each way from two threads, checked; a blocked
# reader woken by rshutdown and by the peer's disconnect), then rstream
# -T v (every byte checked). Each cepd must have served the programs
# (--stats: clients seen), hold nothing of them once their timewait is
# over, and stop cleanly on SIGTERM.
# Args: cep-rdmacm wrapper, cepd, rsocket-duplex. Exit 0 when all passed.
set -u
. "$GB_LIB"
wrap=$1 cepd=$2 dup=$3
out=/tmp/rsocket-cepd
mkdir -p $out /run/cep
pass=0
fail=0
ok() { echo "PASS $*"; pass=$((pass + 1)); }
ko() { echo "FAIL $*"; fail=$((fail + 1)); }
n() { grep -c "$1" "$2"; }

gb_rxe_up || exit 1
gb_start_cepd 500 $out/cepd.log "$cepd" --port rxe0:1 || exit 1
echo "cepd $cepd_pid serves rxe0:1"
gb_signal up

# serve NAME CMD...: a server through cepd; readiness when it listens.
serve() {
	name=$1
	shift
	rm -f $out/$name.ready
	CEP_RDMACM_READY=$out/$name.ready timeout 120 $wrap "$@" >$out/$name.out 2>&1 &
	pid=$!
	while [ ! -e $out/$name.ready ] && kill -0 $pid 2>/dev/null; do sleep 0.02; done
	gb_signal ready-$name
	wait $pid
	rc=$?
	cat $out/$name.out
}

if [ "$GB_NAME" = b ]; then
	gb_wait up 120
	serve duplex "$dup" server $GB_IP 7476
	{ [ $rc = 0 ] && [ "$(n '^duplex: .*: ok$' $out/duplex.out)" = 1 ] &&
		[ "$(n '^shutdown: .*: ok$' $out/duplex.out)" = 1 ]; } &&
		ok "server rsocket-duplex through cepd" || ko "server rsocket-duplex (exit $rc)"
	serve rstream stdbuf -oL rstream -b $GB_IP -T v -S 65536 -C 100
	{ [ $rc = 0 ] && [ "$(n '^custom  *64k  ' $out/rstream.out)" = 1 ]; } &&
		ok "server rstream through cepd" || ko "server rstream (exit $rc)"
	gb_wait done 200 || ko "a did not finish"
else
	gb_wait up 120
	gb_wait ready-duplex 120
	timeout 120 $wrap "$dup" client $GB_PEER_IP 7476 >$out/duplex.out 2>&1
	rc=$?
	cat $out/duplex.out
	{ [ $rc = 0 ] && [ "$(n '^duplex: .*: ok$' $out/duplex.out)" = 1 ] &&
		[ "$(n '^eof: .*: ok$' $out/duplex.out)" = 1 ]; } &&
		ok "client rsocket-duplex through cepd" || ko "client rsocket-duplex (exit $rc)"
	gb_wait ready-rstream 120
	timeout 120 $wrap stdbuf -oL rstream -s $GB_PEER_IP -T v -S 65536 -C 100 >$out/rstream.out 2>&1
	rc=$?
	cat $out/rstream.out
	{ [ $rc = 0 ] && [ "$(n '^custom  *64k  ' $out/rstream.out)" = 1 ]; } &&
		ok "client rstream through cepd" || ko "client rstream (exit $rc)"
	gb_signal done
fi
"$cepd" --stats >$out/stats 2>&1
cat $out/stats
t=$(sed -n 's/^clients [0-9]* total \([0-9]*\) .*/\1/p' $out/stats)
[ "${t:-0}" -ge 2 ] && ok "the programs went through this guest's cepd ($t clients)" ||
	ko "cepd saw ${t:-no} clients"
# Nothing of theirs stays once their connections' timewait is over (a few
# seconds on Soft-RoCE): no id, CEP or QP of a client that has gone.
i=0
until "$cepd" --stats 2>/dev/null | grep -q '^port 0 .* ids 0 ceps 0 qps 0 mc_joins 0$'; do
	i=$((i + 1))
	[ $i -gt 300 ] && break
	sleep 0.05
done
"$cepd" --stats >$out/stats.after 2>&1
grep '^port 0 ' $out/stats.after
grep -q '^port 0 .* ids 0 ceps 0 qps 0 mc_joins 0$' $out/stats.after &&
	ok "no id, CEP or QP left after the programs ($((i * 50)) ms)" ||
	ko "state left in cepd after the programs"
kill -TERM $cepd_pid
wait $cepd_pid
rc=$?
[ $rc = 0 ] && ok "cepd stops on SIGTERM" || ko "cepd exit $rc on SIGTERM"
echo "rsocket-cepd: $pass passed, $fail failed"
[ $fail = 0 ] && [ $pass -gt 0 ]
