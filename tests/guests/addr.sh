#!/bin/sh
# SPDX-License-Identifier: MIT
# Guest script for cepd's source-address checks (src/service/addr.c;
# argument: the addr-guest binary). Guest a builds two RoCE GID tables
# whose devices are in different network namespaces and which look alike:
#   rxe0 on the guest's eth0 (ifindex 2, initial namespace);
#   rxe1 on ns2's eth0 (a veth; ifindex 2 there too), made from inside ns2;
#   ns3, a namespace root made, with a dummy eth0 (ifindex 2) of its own
#     MAC and address, as a pod's;
#   an attacker: nobody runs `unshare -Urn` and dresses a dummy eth0
#     (ifindex 2) with the host's MAC and both tables' addresses.
# addr-guest, as cepd, judges a client process in each (nobody, and root
# on the host) against both tables, while the script changes addresses,
# a name and a MAC between checks; then P_Keys, and the cost of a check.
# Guest b has nothing to do.
set -eu
. "$GB_LIB"
bin=$1
if [ "$GB_NAME" = b ]; then
	echo "guest b: idle (the test is guest a's alone)"
	exit 0
fi
modprobe veth
modprobe dummy
gb_rxe_up
mac=$(cat /sys/class/net/eth0/address)
echo "rxe0 on eth0 (ifindex $(cat /sys/class/net/eth0/ifindex), $mac, $GB_IP)"

ip netns add ns2
ip link add va type veth peer name eth0 netns ns2
ip link set va up
ip -n ns2 link set lo up
ip -n ns2 link set eth0 up
ip -n ns2 addr add 10.88.0.2/24 dev eth0
ip netns exec ns2 rdma link add rxe1 type rxe netdev eth0
echo "rxe1 on ns2's eth0: $(ip -n ns2 -o link show eth0 | cut -c1-90)"

ip netns add ns3
ip -n ns3 link add eth0 index 2 type dummy
ip -n ns3 link set eth0 address 02:00:00:00:00:33
ip -n ns3 addr add 10.99.0.3/24 dev eth0
ip -n ns3 link set eth0 up
echo "ns3: $(ip -n ns3 -o link show eth0 | cut -c1-90)"

# the attacker is an ordinary user with user namespaces (Debian's default)
[ -e /proc/sys/kernel/unprivileged_userns_clone ] && echo 1 >/proc/sys/kernel/unprivileged_userns_clone
nobody="setpriv --reuid=65534 --regid=65534 --clear-groups"
$nobody unshare -Urn sh -c "ip link set lo up && ip link add eth0 index 2 type dummy &&
	ip link set eth0 address $mac && ip addr add $GB_IP/24 dev eth0 &&
	ip addr add 10.88.0.2/24 dev eth0 && ip link set eth0 up && exec sleep 900" &
u=$!
end=$(( $(date +%s) + 30 ))
until nsenter -t $u -n ip -4 -o addr show dev eth0 2>/dev/null | grep -q 10.88.0.2; do
	kill -0 $u 2>/dev/null || { echo "attacker's namespace failed"; exit 1; }
	[ "$(date +%s)" -lt "$end" ] || { echo "attacker's namespace not ready"; exit 1; }
	sleep 0.05
done
echo "attacker (uid $(stat -c %u /proc/$u)): $(nsenter -t $u -n ip -o link show eth0 | cut -c1-90)"
echo "  user namespace $(readlink /proc/$u/ns/user), ours $(readlink /proc/self/ns/user)"

$nobody sleep 900 &
dN=$!
sleep 900 &
dR=$!
ip netns exec ns2 $nobody sleep 900 &
n2=$!
ip netns exec ns3 $nobody sleep 900 &
n3=$!
# each client in its namespace before its HELLO
for p in $n2 $n3; do
	end=$(( $(date +%s) + 10 ))
	until [ "$(readlink /proc/$p/exe 2>/dev/null)" = "$(readlink -f "$(command -v sleep)")" ]; do
		[ "$(date +%s)" -lt "$end" ] || { echo "client $p did not start"; exit 1; }
		sleep 0.05
	done
done
npk=$(ls /sys/class/infiniband/rxe0/ports/1/pkeys | wc -l)

cat >/tmp/addr.cmds <<EOF
port r0 rxe0 1
port r1 rxe1 1
wait-gid r1 ::ffff:10.88.0.2 present
show r0
show r1
client dN r0 $dN
client dN1 r1 $dN
client dR r0 $dR
client n2 r0 $n2
client n2b r1 $n2
client n3 r0 $n3
client n3b r1 $n3
client u r0 $u
client ub r1 $u
# the host's clients: rxe0's entries, not rxe1's (ns2's device is eth0,
# ifindex 2, as the host's)
expect dN r0 ndev=eth0 0
expect dR r0 ndev=eth0 0
expect dN1 r1 ndev=eth0 EACCES
# ns2's: the reverse
expect n2 r0 ndev=eth0 EACCES
expect n2b r1 ndev=eth0 0
# ns3 (root's; a device numbered and named as both, its own MAC and address)
expect n3 r0 ndev=eth0 EACCES
expect n3b r1 ndev=eth0 EACCES
# the attacker's own namespace, dressed as the host's and ns2's
expect u r0 ndev=eth0 EACCES
expect ub r1 ndev=eth0 EACCES
# P_Keys (rxe: 0xffff, $npk entries)
pkey r0 index 0 0
pkey r0 index $npk EINVAL
pkey r0 value 0xffff 0
pkey r0 value 0x7fff 0
pkey r0 value 0x1234 EINVAL
pkey r0 value 0x8000 EINVAL
# a new address of the host is granted to the host's clients at once...
sh ip addr add 10.77.0.9/24 dev eth0
wait-gid r0 ::ffff:10.77.0.9 present
expect dN r0 gid=::ffff:10.77.0.9 0
expect n2 r0 gid=::ffff:10.77.0.9 EACCES
# ... and gone with it
sh ip addr del 10.77.0.9/24 dev eth0
wait-gid r0 ::ffff:10.77.0.9 absent
value dN r0 ::ffff:10.77.0.9 EINVAL
# the same in ns2
sh ip -n ns2 addr add 10.88.0.9/24 dev eth0
wait-gid r1 ::ffff:10.88.0.9 present
expect n2b r1 gid=::ffff:10.88.0.9 0
expect dN1 r1 gid=::ffff:10.88.0.9 EACCES
# a rename in ns2: its clients follow it, the host's are still refused
sh ip -n ns2 link set eth0 down && ip -n ns2 link set eth0 name e9 && ip -n ns2 link set e9 up
expect n2b r1 ndev=e9 0
expect dN1 r1 ndev=e9 EACCES
# What the rule leaves to administrators: root dresses ns3's eth0 as the
# host's (MAC and address): ns3's client gets the host's entries ...
sh ip -n ns3 link set eth0 address $mac && ip -n ns3 addr add $GB_IP/24 dev eth0
expect n3 r0 gid=::ffff:$GB_IP 0
# ... and loses them when root undoes it (the same client, its facts kept fresh)
sh ip -n ns3 addr del $GB_IP/24 dev eth0 && ip -n ns3 link set eth0 address 02:00:00:00:00:33
expect n3 r0 ndev=eth0 EACCES
# the attacker's namespace held all of that from the start, and still gets nothing
expect u r0 gid=::ffff:$GB_IP EACCES
expect ub r1 gid=::ffff:10.88.0.2 EACCES
bench dN r0 20000
bench n2b r1 20000
EOF
rc=0
timeout 400 "$bin" /tmp/addr.cmds || rc=$?
kill $u $dN $dR $n2 $n3 2>/dev/null || true
exit $rc
