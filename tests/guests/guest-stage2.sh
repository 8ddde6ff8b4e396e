#!/bin/sh
# SPDX-License-Identifier: MIT
# Guest stage 2 (PID 1 after switch_root, host's /bin/sh): network up, run the
# test script with its output in /gb/NAME.log, its exit code in /gb/NAME.rc,
# then power off. Never returns: PID 1 exiting would panic the guest.
name=$1
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export HOME=/root
. "/gb/$name.conf"
export GB_NAME GB_PEER GB_IP GB_PEER_IP GB_LIB GB_SCRIPT
export GB_SHARE=/gb
finish() {
	echo "$1" >"/gb/$name.rc.tmp" && mv "/gb/$name.rc.tmp" "/gb/$name.rc"
	sync
	exec /bin/busybox poweroff -f
}
busybox hostname "guest-$name"
# /tmp stays the overlay of the host's /tmp (writes land in the guest's
# tmpfs upper layer): a source or build tree under the host's /tmp - as in a
# CI clone - must stay visible to the guest scripts and programs.
ip link set lo up
if ! modprobe virtio_net; then echo "stage2: modprobe virtio_net failed"; finish 120; fi
ip addr add "$GB_IP/24" dev eth0 && ip link set eth0 up || { echo "stage2: eth0"; finish 121; }
if [ -n "${GB_INTERACTIVE:-}" ]; then
	echo "guest $name ready: eth0 $GB_IP; . \$GB_LIB for helpers"
	setsid sh -c 'exec /bin/sh -i </dev/ttyS0 >/dev/ttyS0 2>&1'
	finish 0
fi
date +%s.%N >"/gb/$name.booted"
cd /gb
/bin/sh "$GB_SCRIPT" "$@" >"/gb/$name.log" 2>&1
finish $?
