#!/bin/sh
# SPDX-License-Identifier: MIT
# Guest script (guests-cepd-attack): cepd attacked by an unprivileged local
# user on Soft-RoCE (issue 26; cepd-attack-guest.c says what each attack
# does and what it must get). Guest a: rxe0 on eth0 and rxe1 on the veth
# end of namespace ns2 (as addr.sh makes it), one cepd owning the CM of
# both ports, and the attacks. Guest b: a cepd on its rxe0 and the peer (a
# listener accepting every REQ with a real QP; SIDR requests on a's
# demand). Neither guest loads ib_cm: cepd owns the CM class.
# Args: cepd-attack-guest, a's cepd (the one attacked), b's cepd, the
# seconds allowed for cycling rxe's QP numbers (attack 1b).
set -u
. "$GB_LIB"
prog=$1
cepd_a=$2
cepd_b=$3
budget=${4:-720}
sock=/run/cep/cepd.sock
out=/tmp/cepd-attack
mkdir -p $out /run/cep

gb_rxe_up || exit 1
echo "rxe0 up (no ib_cm): gid[1] $(gb_gid 1)"

# start_cepd CEPD PORTS...: cepd owning PORTS' CM at the default socket;
# wait until it answers. The socket is made 0666, as the packaged socket
# unit makes it (debian/cepd.socket): any local user reaches the service,
# whichever cepd runs (one before issue 26 took its umask's mode).
start_cepd() {
	bin=$1; shift
	gb_start_cepd 1000 $out/cepd.log "$bin" "$@" || exit 1
	chmod 0666 $sock
	echo "cepd $cepd_pid ($bin) serves $* at $sock"
}

stop_cepd() {
	kill -TERM $cepd_pid
	wait $cepd_pid
	echo "-- cepd exit $?; its log:"
	cat $out/cepd.log
}

if [ "$GB_NAME" = b ]; then
	chmod 0666 /dev/infiniband/uverbs*
	start_cepd "$cepd_b" --port rxe0:1
	timeout 1500 "$prog" peer $sock $GB_IP $GB_PEER_IP "$GB_SHARE"
	rc=$?
	stop_cepd
	exit $rc
fi

# ns2: a namespace root made (a container's), whose eth0 (a veth) carries
# rxe1; the other end, va, answers for 10.88.0.1 so MADs from rxe1 have
# somewhere to go. (A VLAN of eth0 moved to ns2 would put an entry of ns2
# in rxe0's own table, but the guests' kernel has no 8021q module: so a
# port whose entries are all ns2's, and clients of rxe0 in ns2.)
modprobe veth || exit 1
ip netns add ns2
ip link add va type veth peer name eth0 netns ns2
ip addr add 10.88.0.1/24 dev va
ip link set va up
ip -n ns2 link set lo up
ip -n ns2 addr add 10.88.0.2/24 dev eth0
ip -n ns2 link set eth0 up
ip netns exec ns2 rdma link add rxe1 type rxe netdev eth0 || exit 1
end=$(( $(date +%s) + 30 ))
p=/sys/class/infiniband/rxe1/ports/1
until grep -q ACTIVE $p/state 2>/dev/null &&
	grep -q "^0000:0000:0000:0000:0000:ffff:0a58:0002" $p/gids/* 2>/dev/null; do
	[ "$(date +%s)" -lt $end ] || { echo "rxe1 not ready"; exit 1; }
	sleep 0.05
done
# the tables' entries (one grep each: a process per entry of rxe's 1024
# costs minutes under TCG)
for d in rxe0 rxe1; do
	p=/sys/class/infiniband/$d/ports/1
	grep -v "^0000:0000:0000:0000:0000:0000:0000:0000$" -H $p/gids/* | while IFS=: read -r f v; do
		i=${f##*/}
		echo "$d gid[$i] $v $(cat $p/gid_attrs/types/$i) $(cat $p/gid_attrs/ndevs/$i)"
	done
done
# as the udev rule of a real system: any user opens the verbs devices
chmod 0666 /dev/infiniband/uverbs*
start_cepd "$cepd_a" --port rxe0:1 --port rxe1:1
gb_wait peer-ready 300 || { echo "no peer on b"; exit 1; }
timeout 1500 "$prog" attack $sock $GB_IP $GB_PEER_IP 10.88.0.2 10.88.0.1 "$GB_SHARE" "$budget"
rc=$?
gb_signal done
"$cepd_a" --stats
stop_cepd
exit $rc
