#!/bin/sh
# SPDX-License-Identifier: MIT
# Guest script: Debian's programs built on librdmacm, unmodified, on
# libcep's librdmacm.so.1 (docs/rdmacm.md), judged by their own success
# output and exit status: rdmacm-utils, libfabric's fi_pingpong, and (test
# guests-rdmacm-apps) qperf, fio's rdma engine, UCX's io_demo, perftest,
# tgtd's iSER target with libiscsi's initiator. Guest a always runs libcep (started through cep-rdmacm, no
# ib_cm); guest b runs libcep in the first phase, then loads the kernel CM
# (ib_cm, iw_cm, rdma_cm, rdma_ucm) and runs the same programs on Debian's
# librdmacm:
#   libcep   b serves, a connects, both on libcep
#   kserver  b serves on the kernel CM, a connects on libcep
#   kclient  a serves on libcep, b connects on the kernel CM
# At the start of kserver both guests run rdmacm-probe (b on the kernel, a
# on libcep) and a compares the two outputs line by line; "reject" is
# rdmacm-probe's rejected connection (rdma_reject, private data both ways),
# "notify" its connection established by rdma_notify(IBV_EVENT_COMM_EST)
# before the RTU (rdma_establish 3 s later), "mcdata" its multicast
# datagrams, checked; "mckey" is rdmacm-utils' multicast test (a receiver
# on b, the sender on a).
# A fourth phase, "kernel" (both guests on the kernel CM), is for runs by
# hand: what a program does without libcep in the same bed ("udpong" on
# Debian's librdmacm: its rconnect fails with ENOENT on these guests, its
# datagram rsockets make an address handle without a GRH, which RoCE
# refuses, and the error path leaves ENOENT; docs/rdmacm.md). udpong,
# udpong6 and rsdgram (libcep's datagram rsockets) run in phase libcep
# only, for that reason.
# Args: cep-rdmacm wrapper, rdmacm-probe ("-": none), [phases], [programs],
# [cmtime connections], [sock-copy, for rspreload], [rsocket-duplex],
# [rsocket-dgram].
# Each server signals readiness (libcep: CEP_RDMACM_READY; kernel: its
# LISTEN cm_id in `rdma resource`); each client its end. Exit 0 when every
# run passed.
set -u
. "$GB_LIB"
wrap=$1
probe=$2
phases=${3:-"libcep kserver kclient"}
progs=${4:-"rping rpingq rping6 ucmatose udaddy mckey mcdata rdmaserver cmtime fipingpong reject notify"}
[ "$probe" = - ] && progs=$(echo "$progs" | sed 's/reject//; s/notify//; s/mcdata//')
cmtime_n=${5:-100}
sock_copy=${6:-}
rsduplex=${7:-}
rsdgram=${8:-}
# cmtime: one RC QP and two completion channels per connection.
ulimit -n 65536 2>/dev/null || true
out=/tmp/rdmacm
mkdir -p $out
pass=0
fail=0

# IPv6 as well (rping6): a unique local address; rxe adds its RoCE v2 GID.
n=1; [ "$GB_NAME" = b ] && n=2
self6=fd77::$n
peer6=fd77::$((3 - n))
gb_rxe_up || exit 1
ip -6 addr add $self6/64 dev eth0 nodad || exit 1
until grep -qi "^fd77:0000:0000:0000:0000:0000:0000:000$n" \
	/sys/class/infiniband/rxe0/ports/1/gids/* 2>/dev/null; do sleep 0.02; done
echo "rxe0 up (no ib_cm): gid[1] $(gb_gid 1), $self6 in the GID table"
gb_signal up

# mckey: one IPv4 group (MGID ::ffff:239.1.1.7 on RoCE v2), with loopback
# (its default): -l asks for IBV_QP_CREATE_BLOCK_SELF_MCAST_LB, which rxe
# does not create ("unable to create QP: Operation not supported", on the
# kernel's rdma_cm as on libcep).
mcgroup=239.1.1.7

# DAPL's rdma_cm provider (libdaplofa) on this guest's interface; tgtd's
# target name for iSER (libiscsi's iser:// URLs).
printf '%s\n' 'ofa-v2-cep u2.0 nonthreadsafe default libdaplofa.so.2 dapl.2.0 "eth0 0" ""' \
	>$out/dat.conf
export DAT_OVERRIDE=$out/dat.conf
# UCX: connect through its rdma_cm component only (not its TCP one).
export UCX_SOCKADDR_TLS_PRIORITY=rdmacm
# rcopy: a 2.6 MB file made the same on both guests; the server (its
# working directory $out) writes the copy.
rcopy_src=$out/rcopy-src
rcopy_dst=$out/rcopy-dst
seq 1 400000 >$rcopy_src
# librspreload (librdmacm1's): a plain socket program on rsockets,
# sock-copy.c - a server that writes what one connection brings, a client
# that sends its standard input (rcopy's file) and shuts down its side.
# (Python's socket module and OpenBSD netcat, which accept with accept4,
# get ENOTSOCK from accept under Debian 12's librspreload, on Debian's
# librdmacm as on libcep - measured: netcat on both.)
rspreload=/usr/lib/x86_64-linux-gnu/rsocket/librspreload.so.1
rspreload_dst=$out/rspreload-dst
rxe_rcvd() {
	v=$(rdma statistic show link rxe0/1 2>/dev/null | sed -n 's/.* rcvd_pkts \([0-9]*\) .*/\1/p')
	echo "${v:-0}"
}
iqn=iqn.2026-12.org.libcep:t1
ini=iqn.2026-12.org.libcep:initiator
printf '%s\n' "t=iser://$GB_PEER_IP/$iqn/1" "i=$ini" \
	'iscsi-inq -i "$i" "$t" && iscsi-readcapacity16 -i "$i" "$t"' >$out/iser-client.sh

server_cmd() {
	case $1 in
	rping) echo "rping -s -a $GB_IP -v -C 5";;
	rpingq) echo "rping -s -a $GB_IP -v -C 5 -q";;
	rping6) echo "rping -s -a $self6 -v -C 5";;
	ucmatose) echo "ucmatose -c 4";;
	udaddy) echo "udaddy -c 2";;
	mckey) echo "stdbuf -oL mckey -m $mcgroup -b $GB_IP -C 10";;
	rdmaserver) echo "rdma_server";;
	cmtime) echo "cmtime";;
	fipingpong) echo "fi_pingpong -p verbs -e msg -S 1024 -I 10";;
	sendbw) echo "ib_send_bw -R -F -n 100 -s 4096";;
	readlat) echo "ib_read_lat -R -F -n 100";;
	writebw) echo "ib_write_bw -R -F -n 100 -s 4096";;
	sendud) echo "ib_send_lat -R -F -c UD -n 100";;
	atomicbw) echo "ib_atomic_bw -R -F -n 100";;
	sendz) echo "ib_send_bw -z -F -n 100 -s 4096";;
	readz) echo "ib_read_lat -z -F -n 100";;
	qperf) echo "qperf";;
	fio) echo "fio --name=server --ioengine=rdma --port=7472 --rw=read --bs=4k --size=256k --iodepth=4";;
	iser) echo "tgtd -f --iser pool_sz_mb=16";;
	ucx) echo "io_demo -p 7473";;
	dapl) echo "dtest -P ofa-v2-cep -s";;
	reject) echo "$probe $GB_IP $GB_PEER_IP reject-server";;
	notify) echo "$probe $GB_IP $GB_PEER_IP notify-server";;
	mcdata) echo "$probe $GB_IP $GB_PEER_IP mcast-recv";;
	rstream) echo "stdbuf -oL rstream -b $GB_IP -T v -S 4096 -C 1000";;
	rstreama) echo "stdbuf -oL rstream -b $GB_IP -T a -T v -S 1000000 -C 20";;
	rstreamb) echo "stdbuf -oL rstream -b $GB_IP -T b -T v -S 65536 -C 200 -k 1";;
	riostream) echo "stdbuf -oL riostream -b $GB_IP -T v -S 65536 -C 100";;
	rcopy) echo "rcopy";;
	rspreload) echo "env LD_PRELOAD=$rspreload $sock_copy server $GB_IP 7475";;
	udpong) echo "stdbuf -oL udpong -b $GB_IP -T e";;
	udpong6) echo "stdbuf -oL udpong -b $self6 -T e";;
	udponga) echo "stdbuf -oL udpong -b $GB_IP -T e -T a";;
	udpongb) echo "stdbuf -oL udpong -b $GB_IP -T e -T b";;
	rsdgram) echo "$rsdgram server $GB_IP 7478 $GB_PEER_IP";;
	rsduplex) echo "$rsduplex server $GB_IP 7476";;
	rshostile) echo "$rsduplex hostile-server $GB_IP 7477";;
	esac
}

client_cmd() {
	case $1 in
	rping) echo "rping -c -a $GB_PEER_IP -v -C 5";;
	rpingq) echo "rping -c -a $GB_PEER_IP -v -C 5 -q";;
	rping6) echo "rping -c -a $peer6 -v -C 5";;
	ucmatose) echo "ucmatose -s $GB_PEER_IP -c 4";;
	udaddy) echo "udaddy -s $GB_PEER_IP -c 2";;
	mckey) echo "stdbuf -oL mckey -m $mcgroup -s -b $GB_IP -C 10";;
	rdmaserver) echo "rdma_client -s $GB_PEER_IP";;
	cmtime) echo "cmtime -s $GB_PEER_IP -c $cmtime_n";;
	fipingpong) echo "fi_pingpong -p verbs -e msg -S 1024 -I 10 $GB_PEER_IP";;
	sendbw|readlat|writebw|sendud|atomicbw|sendz|readz) echo "$(server_cmd $1) $GB_PEER_IP";;
	fio) echo "fio --name=client --ioengine=rdma --hostname=$GB_PEER_IP --port=7472 --verb=write --rw=write --bs=4k --size=256k --iodepth=1";;
	iser) echo "sh $out/iser-client.sh";;
	ucx) echo "io_demo -p 7473 -i 100 $GB_PEER_IP";;
	dapl) echo "dtest -P ofa-v2-cep -h $GB_PEER_IP";;
	reject) echo "$probe $GB_IP $GB_PEER_IP reject-client";;
	notify) echo "$probe $GB_IP $GB_PEER_IP notify-client";;
	mcdata) echo "$probe $GB_IP $GB_PEER_IP mcast-send";;
	rstream) echo "stdbuf -oL rstream -s $GB_PEER_IP -T v -S 4096 -C 1000";;
	rstreama) echo "stdbuf -oL rstream -s $GB_PEER_IP -T a -T v -S 1000000 -C 20";;
	rstreamb) echo "stdbuf -oL rstream -s $GB_PEER_IP -T b -T v -S 65536 -C 200 -k 1";;
	riostream) echo "stdbuf -oL riostream -s $GB_PEER_IP -T v -S 65536 -C 100";;
	rcopy) echo "rcopy $rcopy_src $GB_PEER_IP:$rcopy_dst";;
	rspreload) echo "env LD_PRELOAD=$rspreload $sock_copy client $GB_PEER_IP 7475";;
	udpong) echo "stdbuf -oL udpong -s $GB_PEER_IP -C 1000";;
	udpong6) echo "stdbuf -oL udpong -s $peer6 -C 1000";;
	udponga) echo "stdbuf -oL udpong -s $GB_PEER_IP -C 1000 -T a";;
	udpongb) echo "stdbuf -oL udpong -s $GB_PEER_IP -C 1000 -T b";;
	rsdgram) echo "$rsdgram client $GB_PEER_IP 7478";;
	rsduplex) echo "$rsduplex client $GB_PEER_IP 7476";;
	rshostile) echo "$rsduplex hostile-client $GB_PEER_IP 7477";;
	esac
}

tcp_port_of() { case $1 in fipingpong) echo 47592;; qperf) echo 19765;; dapl) echo 15828;; esac; }

port_of() {
	case $1 in
	rping*|udaddy) echo 7174;; reject) echo 7480;; notify) echo 7481;;
	sendbw|readlat|writebw|sendud|atomicbw|sendz|readz) echo 18515;;
	fio) echo 7472;; iser) echo 3260;; ucx) echo 7473;; rcopy) echo 7427;; rspreload) echo 7475;; rsduplex) echo 7476;; rshostile) echo 7477;;
	udpong*) echo 7174;; rsdgram) echo 7478;;
	*) echo 7471;;
	esac
}

# check ROLE PROG OUTPUT RC: the program's own verdict.
check() {
	role=$1 prog=$2 f=$3 rc=$4
	n() { grep -c "$1" "$f"; }
	# fio's rdma engine reports errors as "fio: ..." and still exits 0.
	fio_errors() { grep '^fio: ' "$f" | grep -vc '^fio: waiting for connection$'; }
	ok=1
	case $role-$prog in
	*) [ "$rc" = 0 ] || ok=0;;
	esac
	case $role-$prog in
	server-rping*) [ "$(n '^server ping data: rdma-ping-')" = 5 ] || ok=0;;
	client-rping*) [ "$(n '^ping data: rdma-ping-')" = 5 ] || ok=0;;
	*-ucmatose) { [ "$(n '^data transfers complete')" = 1 ] &&
		[ "$(n '^return status 0$')" = 1 ]; } || ok=0;;
	*-udaddy) { [ "$(n '^data transfers complete')" = 1 ] &&
		[ "$(n '^return status 0$')" = 1 ]; } || ok=0;;
	# mckey: the join's address handle as the kernel's rdma_cm gives it
	# on RoCE v2, and its 10 datagrams sent / received (the receiver
	# waits for all 10)
	*-mckey) { [ "$(n "^mckey: joined dgid: ::ffff:$mcgroup mlid 0x0 sl 0\$")" = 1 ] &&
		[ "$(n '^data transfers complete$')" = 1 ] &&
		[ "$(n 'fail\|error')" = 0 ]; } || ok=0;;
	server-rdmaserver) [ "$(n '^rdma_server: end 0$')" = 1 ] || ok=0;;
	client-rdmaserver) [ "$(n '^rdma_client: end 0$')" = 1 ] || ok=0;;
	client-cmtime) { [ "$(n '^connect *:')" = 1 ] && [ "$(n '^disconnect *:')" = 1 ] &&
		[ "$(n 'error\|failure\|failing')" = 0 ]; } || ok=0;;
	server-cmtime) [ "$(n 'error\|failure\|failing')" = 0 ] || ok=0;;
	server-reject) [ "$(n '^server: ok$')" = 1 ] || ok=0;;
	client-reject) [ "$(n '^client: ok$')" = 1 ] || ok=0;;
	server-notify) [ "$(n '^server: ok$')" = 1 ] || ok=0;;
	*-fipingpong) [ "$(n '^1k  *10  *=10 ')" = 1 ] || ok=0;;
	client-notify) [ "$(n '^client: ok$')" = 1 ] || ok=0;;
	server-mcdata) [ "$(n '^receiver: ok$')" = 1 ] || ok=0;;
	client-mcdata) [ "$(n '^sender: ok$')" = 1 ] || ok=0;;
	*-sendz|client-readz) [ "$(n '^ *[0-9][0-9]* *100  ')" = 1 ] || ok=0;;
	server-readz) [ "$(n '^ remote address: LID ')" = 1 ] || ok=0;; # the client reports
	client-qperf) { [ "$(n '^    bw  =  [0-9.]* [KMG]*B/sec$')" = 2 ] &&
		[ "$(n '^    latency  =  [0-9.]* [mun]*s\(ec\)*$')" = 2 ]; } || ok=0;;
	server-qperf) [ "$(n 'fail\|error')" = 0 ] || ok=0;;
	server-fio) { [ "$(n ': err= 0: ')" = 1 ] && [ "$(fio_errors)" = 0 ]; } || ok=0;;
	client-fio) { [ "$(n ': err= 0: ')" = 1 ] && [ "$(fio_errors)" = 0 ] &&
		[ "$(n '^     issued rwts: total=0,64,0,0 ')" = 1 ]; } || ok=0;;
	server-ucx) { [ "$(n '] got new connection request ')" = 1 ] &&
		[ "$(n '] Remote id is 1, ')" = 1 ]; } || ok=0;;
	client-ucx) [ "$(n "Client exit with status 'OK'$")" = 1 ] || ok=0;;
	# iscsi-inq and iscsi-readcapacity16: two iSER connections, two logins.
	client-iser) { [ "$(n '^Vendor:IET *$')" = 1 ] &&
		[ "$(n '^Total size:4194304$')" = 1 ]; } || ok=0;;
	server-iser) { [ "$(n '^tgtd: iser_cm_conn_established(.*, established$')" = 2 ] &&
		[ "$(n 'login failed')" = 0 ]; } || ok=0;;
	# rstream -T v: every byte received checked by the program (its
	# "data verification failed"), one size each way: non-blocking calls
	# (its default), through rpoll (-T a), blocking (-T b); the result
	# line on both sides. (Its default run of every size takes 3 minutes
	# for the 64-byte latency test alone on these guests.)
	# riostream: the same, its data written by riowrite straight into
	# the receiver's riomap'ed buffer.
	# -T b runs with SO_KEEPALIVE every second (-k 1): its getsockopt says
	# so (the server sets it on its listener and again on the connection),
	# and the keepalive writes cross the 1.5 s of the test.
	*-rstream|*-rstreama|*-rstreamb|*-riostream) { [ "$(n '^custom  *[0-9]*[kmg]*  ')" = 1 ] &&
		{ [ "$prog" != rstreamb ] || [ "$(n '^Keepalive: ON$')" -ge 1 ]; } &&
		[ "$(n 'fail\|error\|rsend\|rrecv\|rpoll\|rconnect\|raccept\|rlisten\|rbind\|riomap\|riowrite')" = 0 ]; } || ok=0;;
	# rsocket-duplex: 8 MiB each way from two threads at once, checked;
	# a reader blocked in rrecv woken by another thread's rshutdown (the
	# server) and by the peer's disconnect (the client)
	server-rsduplex) { [ "$(n '^duplex: .*: ok$')" = 1 ] && [ "$(n '^shutdown: .*: ok$')" = 1 ]; } ||
		ok=0;;
	client-rsduplex) { [ "$(n '^duplex: .*: ok$')" = 1 ] && [ "$(n '^eof: .*: ok$')" = 1 ]; } || ok=0;;
	# a hostile peer (rsocket-duplex hostile-client: rdma_cm and verbs,
	# twice the server's message credits): the libcep server ends the
	# connection with POLLERR and EPROTO
	server-rshostile) [ "$(n '^hostile: POLLERR after .*, then rrecv EPROTO: ok$')" = 1 ] || ok=0;;
	client-rshostile) [ "$(n '^hostile: [0-9]* writes posted: done$')" = 1 ] || ok=0;;
	# rcopy: the client's own "done"; the server's copy compared with
	# the source, made the same on both guests
	client-rcopy) [ "$(n 'done$')" = 1 ] || ok=0;;
	server-rcopy) { cmp -s $rcopy_src $rcopy_dst && [ "$(n 'done$')" = 1 ]; } ||
		{ echo "rcopy: the server's copy differs from the source"; ok=0; };;
	# librspreload + sock-copy: the server's output is the client's input, and
	# it came over RDMA (2.6 MB: at least 2,000 packets of 1,024 bytes)
	client-rspreload) [ "$(n '^client: 2688895 bytes$')" = 1 ] || ok=0;;
	# udpong (datagram rsockets, libcep on both sides): the client's
	# result line (printed only when every datagram of its run was sent
	# and its end message answered; udpong exits 0 either way), the
	# server's login line, and the data came over rxe0 (1,000 datagrams
	# of 1,000 bytes: at least 500 packets - the first ones go over the UDP
	# side channel until the client has the server's QP number and its
	# address handle, and datagrams may be dropped), not only over UDP
	client-udpong*) { [ "$(n '^custom  *1000  *[0-9.]*k*  ')" = 1 ] &&
		[ "$(n 'rsend\|rrecv\|rconnect\|rbind')" = 0 ]; } || ok=0;;
	server-udpong*) { [ "$(n '^client login from ')" = 1 ] &&
		[ "$(sed -n 's/^rxe0 received \([0-9]*\) packets$/\1/p' "$f")" -ge 500 ]; } || ok=0;;
	# rsocket-dgram: every byte and source checked on both sides; the
	# 121 datagrams (most of them, the first over UDP) over rxe0
	client-rsdgram) [ "$(n '^client: .* every byte and source checked: ok$')" = 1 ] || ok=0;;
	server-rsdgram) { [ "$(n '^server: [0-9]* datagrams intact from .*: ok$')" = 1 ] &&
		[ "$(sed -n 's/^rxe0 received \([0-9]*\) packets$/\1/p' "$f")" -ge 100 ]; } || ok=0;;
	server-rspreload) { cmp -s $rcopy_src $rspreload_dst && [ "$(n '^server: 2688895 bytes$')" = 1 ] &&
		[ "$(sed -n 's/^rxe0 received \([0-9]*\) packets$/\1/p' "$f")" -ge 2000 ]; } ||
		{ echo "rspreload: the output differs from the input, or not over RDMA"; ok=0; };;
	esac
	if [ $ok = 1 ]; then
		echo "PASS $role $prog (exit $rc)"
		pass=$((pass + 1))
	else
		echo "FAIL $role $prog (exit $rc)"
		fail=$((fail + 1))
	fi
}

# forever PROG: a server that never ends by itself (stopped once its client
# is done, judged by its output).
forever() { case $1 in cmtime|qperf|iser|ucx|rcopy|udpong*) return 0;; esac; return 1; }

# iser_setup: give the running tgtd one target with one 4 MiB LUN, open to
# every address, and to libiscsi's initiator name (tgt 1.0.85's iSER login
# requires an initiator-name ACL as well) - tgtadm over tgtd's socket.
iser_setup() {
	truncate -s 4M /tmp/iser.img &&
	tgtadm --lld iser --mode target --op new --tid 1 --targetname $iqn &&
	tgtadm --lld iser --mode logicalunit --op new --tid 1 --lun 1 \
		--backing-store /tmp/iser.img &&
	tgtadm --lld iser --mode target --op bind --tid 1 --initiator-address ALL &&
	tgtadm --lld iser --mode target --op bind --tid 1 --initiator-name $ini
}

# stop PID: end a server started under timeout(1).
# timeout(1) leads its own process group: the whole group, so that a
# server that outlives timeout (tgtd) cannot hold the port's CM class.
# SIGTERM first (tgtd ignores it: SIGKILL after 5 s).
stop() {
	kill -TERM "-$1" 2>/dev/null
	i=0
	while kill -0 "$1" 2>/dev/null && [ $i -lt 250 ]; do sleep 0.02; i=$((i + 1)); done
	kill -KILL "-$1" 2>/dev/null
	wait "$1"
}

# serve PHASE PROG [WRAPPER]: start the server, signal readiness, wait for
# the client's end, then for the server (one that never ends: stopped).
serve() {
	phase=$1 prog=$2 w=${3:-}
	f=$out/$phase-$prog-server.out
	flag=ready-$phase-$prog
	ready=$GB_SHARE/$GB_NAME.$flag
	# tgtd listens before it has a target: set up first, then signal.
	[ "$prog" = iser ] && ready=$out/$flag
	rm -f "$GB_SHARE/$GB_NAME.$flag" "$out/$flag"
	[ "$prog" = rcopy ] && rm -f "$rcopy_dst"
	echo "== $phase: server $prog ($([ -n "$w" ] && echo libcep || echo kernel CM))"
	pk0=$(rxe_rcvd)
	if [ "$prog" = rspreload ]; then
		# the data on stdout, anything else on stderr
		rm -f "$rspreload_dst"
		CEP_RDMACM_READY=$ready timeout 200 $w $(server_cmd "$prog") \
			>"$rspreload_dst" 2>"$f" &
	else
		CEP_RDMACM_READY=$ready timeout 200 $w $(server_cmd "$prog") \
			>"$f" 2>&1 &
	fi
	pid=$!
	case $prog in
	mckey|mcdata)
		# No listener: the receiver is ready once it has joined (its
		# receives are posted before the join).
		i=0
		until grep -q '^mckey: joined dgid\|^receiver: joined$' "$f" ||
			! kill -0 $pid 2>/dev/null ||
			[ $i -ge 3000 ]; do sleep 0.02; i=$((i + 1)); done
		gb_signal "$flag";;
	udpong*)
		# No listener, no CEP_RDMACM_READY: ready once its UDP socket
		# is bound (the service thread reads it from then on).
		i=0
		until grep -qiE "^ *[0-9]+: [0-9A-F]+:$(printf '%04X' 7174) " /proc/net/udp /proc/net/udp6 ||
			! kill -0 $pid 2>/dev/null || [ $i -ge 3000 ]; do sleep 0.02; i=$((i + 1)); done
		gb_signal "$flag";;
	fipingpong|qperf|dapl)
		# Their rdma_cm listener comes after the client's TCP control
		# connection (fi_pingpong: port 47592, qperf: 19765): that
		# socket is the readiness.
		gb_wait_tcp_listen "$(tcp_port_of "$prog")" || echo "no $prog control socket"
		gb_signal "$flag";;
	*)
		if [ -z "$w" ]; then
			gb_wait_cm_listen "$(port_of "$prog")" $pid || echo "no kernel listener"
		else
			while [ ! -e "$ready" ] && kill -0 $pid 2>/dev/null; do sleep 0.02; done
		fi
		if [ "$prog" = iser ]; then
			iser_setup || echo "tgtadm failed"
		fi
		[ -e "$GB_SHARE/$GB_NAME.$flag" ] || gb_signal "$flag";;
	esac
	gb_wait "done-$phase-$prog" 300 || true
	if forever "$prog"; then
		stop $pid
		rc=0
	else
		# A server whose client is gone gets 30 s to end by itself.
		i=0
		while kill -0 $pid 2>/dev/null && [ $i -lt 1500 ]; do sleep 0.02; i=$((i + 1)); done
		if kill -0 $pid 2>/dev/null; then
			echo "server $prog still running 30 s after its client: stopped"
			stop $pid
			rc=1
		else
			wait $pid
			rc=$?
		fi
	fi
	# RDMA packets this guest's rxe0 received meanwhile: data that went
	# over TCP instead (librspreload falls back to a real socket when
	# rsocket() fails) would not count
	echo "rxe0 received $(( $(rxe_rcvd) - pk0 )) packets" >>"$f"
	cat "$f"
	check server "$prog" "$f" $rc
}

# qperf_client [WRAPPER]: qperf's client, one test per run. Debian's qperf
# 0.4.11 sends its rdma_cm port to the client before it calls rdma_listen
# (fixed upstream after that release, "Fix rdmacm race"): a client quick
# enough to connect in between finds no listener, the server's CM answers
# REJ 8 (Invalid Service ID, kernel: icm_no_listener_err) and qperf stops
# with "Event rejected". A libcep client gets there first in about a third
# of the runs against the kernel's server (measured). So a test whose only
# REJ was that one, by libcep's own count (CEP_RDMACM_STATS), runs again, up
# to 4 times; any other failure, or a kernel client (no count), stands.
# Not at once: the server's rejected test, by all signs, still waits for the connection
# that never comes until qperf's timeout (-to, 5 s by default) ends it, and
# a client that asks sooner waits for the next test's port behind it with
# the same 5 s and gives up ("failed to receive RDMA CM TCP IPv4 server
# port: timed out", once in CI); 8 s covers the test's -t 1 and the timeout.
qperf_client() {
	for t in rc_bw rc_lat rc_rdma_read_lat rc_rdma_write_bw; do
		try=1
		while :; do
			CEP_RDMACM_STATS=1 timeout 60 "$@" qperf "$GB_PEER_IP" -cm1 -t 1 $t \
				>$out/qperf-try.out 2>&1
			rc=$?
			[ $rc = 0 ] || [ $# = 0 ] || [ $try -ge 4 ] ||
				! grep -q '^unexpected event from RDMA CM: Event rejected$' $out/qperf-try.out ||
				[ "$(grep -o '; REJ [a-z]* reason [^;]*' $out/qperf-try.out)" != \
					"; REJ received reason 8 (Invalid Service ID) x1" ] || {
				echo "qperf $t: REQ before the server's listen (REJ 8), run $try; again:"
				sed 's/^/  (rejected run) /' $out/qperf-try.out
				sleep 8
				try=$((try + 1))
				continue
			}
			cat $out/qperf-try.out
			[ $rc = 0 ] || return $rc
			break
		done
	done
}

# connect PHASE PROG [WRAPPER]: wait for the server, run the client.
connect() {
	phase=$1 prog=$2 w=${3:-}
	f=$out/$phase-$prog-client.out
	echo "== $phase: client $prog ($([ -n "$w" ] && echo libcep || echo kernel CM))"
	if gb_wait "ready-$phase-$prog" 120; then
		if [ "$prog" = qperf ]; then
			qperf_client $w >"$f" 2>&1
		else
			if [ "$prog" = rspreload ]; then
				timeout 200 $w $(client_cmd "$prog") <"$rcopy_src" >"$f" 2>&1
			else
				timeout 200 $w $(client_cmd "$prog") >"$f" 2>&1
			fi
		fi
		rc=$?
	else
		echo "no server" >"$f"
		rc=1
	fi
	gb_signal "done-$phase-$prog"
	cat "$f"
	check client "$prog" "$f" $rc
}

# busy LABEL: a libcep program on a port whose CM class is taken (by another
# libcep process, or by ib_cm) must fail, saying why.
busy() {
	f=$out/busy-$1.out
	timeout 30 $wrap rping -s -a $GB_IP -p 7998 >"$f" 2>&1
	rc=$?
	cat "$f"
	if [ $rc != 0 ] && grep -q "already registered on this port" "$f" &&
		grep -q "^rdma_bind_addr: Device or resource busy" "$f"; then
		echo "PASS busy ($1): the second CM on the port is refused (exit $rc)"
		pass=$((pass + 1))
	else
		echo "FAIL busy ($1) (exit $rc)"
		fail=$((fail + 1))
	fi
}

for phase in $phases; do
	if { [ "$phase" != libcep ] && [ "$GB_NAME" = b ] || [ "$phase" = kernel ]; } &&
		[ ! -d /sys/module/ib_cm ]; then
		modprobe -a ib_cm iw_cm rdma_cm rdma_ucm || { echo "modprobe kernel CM failed"; exit 1; }
		echo "kernel CM loaded on $GB_NAME"
	fi
	t0=$(date +%s.%N)
	if [ "$phase" = libcep ] && [ "$GB_NAME" = b ]; then
		echo "== libcep: one CM per port"
		CEP_RDMACM_READY=$out/holder.ready $wrap rping -s -a $GB_IP -p 7999 \
			>$out/holder.out 2>&1 &
		holder=$!
		while [ ! -e $out/holder.ready ] && kill -0 $holder 2>/dev/null; do sleep 0.02; done
		busy "another libcep process"
		kill $holder
		wait $holder
	fi
	if [ "$phase" = kserver ] && [ "$GB_NAME" = b ]; then
		echo "== kserver: one CM per port"
		busy "ib_cm loaded"
	fi
	if [ "$phase" = kserver ] && [ "$probe" != - ]; then
		if [ "$GB_NAME" = b ]; then
			# The kernel resolves the peer's address by ARP: a must be up.
			gb_wait up 120
			timeout 60 "$probe" "$GB_IP" "$GB_PEER_IP" >"$GB_SHARE/b.probe.out" 2>&1
			gb_signal probe
		else
			timeout 60 "$wrap" "$probe" "$GB_IP" "$GB_PEER_IP" >$out/probe.out 2>&1
			if gb_wait probe 120 && diff -u "$GB_SHARE/b.probe.out" $out/probe.out; then
				echo "PASS probe: libcep answers as the kernel's rdma_cm" \
					"($(grep -c . $out/probe.out) lines)"
				pass=$((pass + 1))
			else
				echo "FAIL probe: libcep and the kernel's rdma_cm differ (- kernel, + libcep)"
				fail=$((fail + 1))
			fi
		fi
	fi
	for prog in $progs; do
		# rshostile checks libcep's server: librdmacm's rsocket.c has no
		# check of a peer past its credits (it appends over unread
		# messages), so not run with Debian's as the server
		if [ "$phase-$prog" = kserver-rshostile ]; then
			echo "== $phase: $prog not run (the server would be Debian's librdmacm)"
			continue
		fi
		# rstream -T a with Debian's librdmacm as the client: its rpoll
		# reports POLLHUP beside POLLIN when the server's disconnect
		# follows its last data, and rstream stops at POLLHUP with data
		# unread (exit 16) - also with Debian's librdmacm on both sides
		# (measured: phase kernel, run by hand), so not run there;
		# libcep's rpoll says POLLHUP once the data are read
		# (docs/rdmacm.md)
		if [ "$phase-$prog" = kclient-rstreama ]; then
			echo "== $phase: $prog not run (Debian's librdmacm client: POLLHUP before its last data)"
			continue
		fi
		case $phase-$GB_NAME in
		libcep-b) serve $phase $prog "$wrap";;
		libcep-a|kserver-a) connect $phase $prog "$wrap";;
		kserver-b) serve $phase $prog;;
		kclient-a) serve $phase $prog "$wrap";;
		kclient-b) connect $phase $prog;;
		kernel-a) connect $phase $prog;;
		kernel-b) serve $phase $prog;;
		esac
	done
	echo "== $phase done in $(awk "BEGIN { printf \"%.1f\", $(date +%s.%N) - $t0 }") s"
done
rdma statistic show link rxe0/1 2>/dev/null || true
echo "rdmacm: $pass passed, $fail failed"
[ $fail = 0 ] && [ $pass -gt 0 ]
