#!/bin/bash
# SPDX-License-Identifier: MIT
# Soft-RoCE guest test bed: boots two TCG qemu guests ("a" and "b") from a
# Debian kernel, joined by one virtual Ethernet link, each running a script
# from the host file system. Exit 0 when both scripts exit 0, 1 when one fails,
# 77 (meson "skip") with a stated reason when qemu or the kernel is unusable.
#
#   guestbed.sh prepare                       build the cache, print its path
#   guestbed.sh run [-o DIR] [-t SEC] SCRIPT_A SCRIPT_B [-- ARGS...]
#   guestbed.sh shell [a|b]                   one interactive guest (console)
#
# Inside a guest, the host's / is mounted read-only (9p) under a tmpfs
# overlay, and the run directory (-o, default a fresh temporary one) is
# mounted writable at /gb: scripts find logs, results and readiness flags
# there (see guestlib.sh). Environment:
#   LIBCEP_GUESTS_CACHE  cache (default ${XDG_CACHE_HOME:-~/.cache}/libcep-guests)
#   GUESTBED_TIMEOUT     per-guest wall limit in seconds (default 300)
#   GUESTBED_KERNEL_DEB  use this linux-image .deb instead of apt-get download
#   GUESTBED_MEM         guest memory in MiB (default 512)
#   GUESTBED_QEMU        qemu binary (default qemu-system-x86_64)
set -u

SKIP=77
here=$(cd "$(dirname "$0")" && pwd)
cache_root=${LIBCEP_GUESTS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/libcep-guests}
timeout_s=${GUESTBED_TIMEOUT:-300}
mem=${GUESTBED_MEM:-512}
qemu=${GUESTBED_QEMU:-qemu-system-x86_64}

skip() { echo "guestbed: SKIP: $*" >&2; exit $SKIP; }
die() { echo "guestbed: error: $*" >&2; exit 1; }
log() { echo "guestbed: $*" >&2; }

# Modules the guests load, by name; their dependencies come along. The CRC
# modules are requested by rxe at run time through the crypto API.
GUEST_MODULES="virtio_pci virtio_net 9p 9pnet_virtio overlay dummy veth
	rdma_rxe ib_uverbs ib_umad ib_cm iw_cm rdma_cm rdma_ucm
	crc32_generic crc32-pclmul"
# Loaded by the initramfs before the root file system exists.
EARLY_MODULES="virtio_pci 9pnet_virtio 9p overlay"

# The initramfs /init: mount the host root read-only with a tmpfs overlay,
# the run directory writable at /gb, the trimmed modules, then hand over to
# the stage-2 script named in the run's conf file.
read -r -d '' INIT_SCRIPT <<'EOF'
#!/bin/busybox sh
/bin/busybox mkdir -p /proc /sys /dev /ro /rw /newroot
/bin/busybox mount -t proc proc /proc
/bin/busybox mount -t sysfs sys /sys
/bin/busybox mount -t devtmpfs dev /dev
fail() { echo "guestbed-init: $*"; /bin/busybox poweroff -f; }
for m in $(/bin/busybox cat /early.list); do
	/bin/busybox insmod "$m" || fail "insmod $m"
done
arg() { /bin/busybox sed -n "s/.*$1=\([^ ]*\).*/\1/p" /proc/cmdline; }
name=$(arg gb.name); mods=$(arg gb.mods); kver=$(/bin/busybox uname -r)
/bin/busybox mount -t 9p -o trans=virtio,version=9p2000.L,ro,msize=262144,cache=loose hostroot /ro || fail "9p root"
/bin/busybox mount -t tmpfs -o size=128m tmpfs /rw || fail tmpfs
/bin/busybox mkdir -p /rw/upper /rw/work
/bin/busybox mount -t overlay -o lowerdir=/ro,upperdir=/rw/upper,workdir=/rw/work overlay /newroot || fail overlay
/bin/busybox mkdir -p /newroot/gb /newroot/usr/lib/modules/$kver
/bin/busybox mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144 gbshare /newroot/gb || fail "9p share"
/bin/busybox mount --bind /newroot$mods /newroot/usr/lib/modules/$kver || fail "modules"
for d in proc sys dev; do /bin/busybox mount --move /$d /newroot/$d; done
[ -r /newroot/gb/$name.conf ] || fail "no /gb/$name.conf"
stage2=$(/bin/busybox sed -n 's/^GB_STAGE2=//p' /newroot/gb/$name.conf)
exec /bin/busybox switch_root /newroot /bin/sh "$stage2" "$name"
EOF

kernel_version() {
	local dep
	dep=$(apt-cache depends linux-image-amd64 2>/dev/null |
		sed -n 's/^ *Depends: \(linux-image-[0-9][^ ]*\)$/\1/p' | head -n1)
	[ -n "$dep" ] || return 1
	echo "${dep#linux-image-}"
}

# Fill $cache_root/$kver (under a lock; built in a temporary directory and
# renamed, so a half-built cache is never used).
prepare() {
	command -v "$qemu" >/dev/null || skip "$qemu not found (package qemu-system-x86)"
	[ -x /bin/busybox ] || skip "/bin/busybox missing (package busybox-static)"
	for t in depmod modprobe cpio gzip flock timeout; do
		command -v $t >/dev/null || skip "$t not installed"
	done
	local deb="${GUESTBED_KERNEL_DEB:-}" kver
	if [ -n "$deb" ]; then
		kver=$(dpkg-deb -f "$deb" Package 2>/dev/null) || skip "cannot read $deb"
		kver=${kver#linux-image-}
	else
		kver=$(kernel_version) || skip "apt knows no linux-image-amd64 (run apt-get update)"
	fi
	local init_sum dir
	init_sum=$(printf '%s\n%s\n' "$INIT_SCRIPT" "$GUEST_MODULES" | md5sum | cut -c1-8)
	dir=$cache_root/$kver-$init_sum
	if [ -e "$dir/complete" ]; then echo "$dir"; return 0; fi
	mkdir -p "$cache_root" || skip "cannot create $cache_root"
	exec 9>"$cache_root/lock"
	flock -w 600 9 || skip "cache lock busy for 10 min"
	if [ -e "$dir/complete" ]; then exec 9>&-; echo "$dir"; return 0; fi
	local tmp
	tmp=$(mktemp -d "$cache_root/tmp.XXXXXX") || skip "mktemp in $cache_root"
	log "preparing kernel $kver in $dir"
	if [ -z "$deb" ]; then
		deb=$(ls /var/cache/apt/archives/linux-image-"$kver"_*.deb 2>/dev/null | head -n1)
		if [ -z "$deb" ]; then
			chmod 777 "$tmp"  # apt-get download drops to user _apt
			(cd "$tmp" && apt-get download -q "linux-image-$kver" >"$tmp/download.log" 2>&1) ||
				{ cat "$tmp/download.log" >&2; rm -rf "$tmp"; skip "apt-get download linux-image-$kver failed"; }
			deb=$(ls "$tmp"/linux-image-*.deb | head -n1)
		fi
	fi
	dpkg -x "$deb" "$tmp/x" || { rm -rf "$tmp"; skip "dpkg -x $deb failed"; }
	rm -f "$tmp"/linux-image-*.deb
	depmod -b "$tmp/x" "$kver" || { rm -rf "$tmp"; skip "depmod failed"; }
	local full=$tmp/x/lib/modules/$kver trim=$tmp/modules/lib/modules/$kver ko rel m
	mkdir -p "$trim" "$tmp/initramfs/bin" "$tmp/initramfs/lib"
	cp "$full"/modules.builtin "$full"/modules.builtin.modinfo "$full"/modules.order "$trim"/
	for m in $GUEST_MODULES; do
		modprobe -d "$tmp/x" -S "$kver" --show-depends "$m" >"$tmp/deps" ||
			{ rm -rf "$tmp"; skip "module $m missing from kernel $kver"; }
		while read -r _ ko _; do
			rel=${ko#"$full"/}
			mkdir -p "$trim/$(dirname "$rel")"
			cp -n "$ko" "$trim/$rel"
		done < <(grep '^insmod ' "$tmp/deps")
	done
	depmod -b "$tmp/modules" "$kver" || { rm -rf "$tmp"; skip "depmod (trimmed) failed"; }
	: >"$tmp/initramfs/early.list"
	for m in $EARLY_MODULES; do
		modprobe -d "$tmp/modules" -S "$kver" --show-depends "$m" | while read -r _ ko _; do
			rel=${ko#"$trim"/}
			grep -qx "/lib/$rel" "$tmp/initramfs/early.list" && continue
			mkdir -p "$tmp/initramfs/lib/$(dirname "$rel")"
			cp "$ko" "$tmp/initramfs/lib/$rel"
			echo "/lib/$rel" >>"$tmp/initramfs/early.list"
		done
	done
	cp /bin/busybox "$tmp/initramfs/bin/busybox"
	printf '%s\n' "$INIT_SCRIPT" >"$tmp/initramfs/init"
	chmod 755 "$tmp/initramfs/init"
	(cd "$tmp/initramfs" && find . | cpio -o -H newc --quiet | gzip -1) >"$tmp/initramfs.cpio.gz" ||
		{ rm -rf "$tmp"; skip "cpio failed"; }
	cp "$tmp/x/boot/vmlinuz-$kver" "$tmp/vmlinuz"
	rm -rf "$tmp/x" "$tmp/initramfs" "$tmp/deps"
	echo "$kver" >"$tmp/kver"
	touch "$tmp/complete"
	chmod 755 "$tmp"
	rm -rf "$dir"
	mv -T "$tmp" "$dir" || { rm -rf "$tmp"; die "cannot rename cache into $dir"; }
	exec 9>&-
	log "cache ready: $(du -sh "$dir" | cut -f1)"
	echo "$dir"
}

# Quote for a POSIX shell.
shq() { printf "'%s'" "$(printf '%s' "$1" | sed "s/'/'\\\\''/g")"; }

write_conf() { # name peer script args...
	local name=$1 peer=$2 script=$3; shift 3
	local n=1; [ "$name" = b ] && n=2
	local p=2; [ "$name" = b ] && p=1
	{
		echo "GB_STAGE2=$here/guest-stage2.sh"
		echo "GB_NAME=$name"
		echo "GB_PEER=$peer"
		echo "GB_IP=10.77.0.$n"
		echo "GB_PEER_IP=10.77.0.$p"
		echo "GB_LIB=$(shq "$here/guestlib.sh")"
		echo "GB_SCRIPT=$(shq "$script")"
		printf 'set --'
		for a in "$@"; do printf ' %s' "$(shq "$a")"; done
		echo
	} >"$out/$name.conf"
}

qemu_cmd() { # name netdev-args [console]
	local name=$1 net=$2 console mac=52:54:00:77:00:01
	console=${3:-file:$out/$name.console}
	[ "$name" = b ] && mac=52:54:00:77:00:02
	echo timeout -k 5 "$timeout_s" "$qemu" -accel tcg,thread=multi -cpu max \
		-m "$mem" -smp 1 -nodefaults -no-user-config -display none -no-reboot \
		-serial "$console" \
		-kernel "$cdir/vmlinuz" -initrd "$cdir/initramfs.cpio.gz" \
		-append "'console=ttyS0 panic=-1 quiet loglevel=4 gb.name=$name gb.mods=$cdir/modules/lib/modules/$kver'" \
		-virtfs local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap \
		-virtfs "local,path=$out,mount_tag=gbshare,security_model=none,multidevs=remap" \
		-netdev "$net" -device "virtio-net-pci,netdev=n0,mac=$mac"
}

check_paths() {
	case "$cdir$out$here" in
	*[[:space:]\'\"]*) die "paths must not contain blanks or quotes: $cdir $out $here";;
	esac
}

run() {
	out=""
	while [ $# -gt 0 ]; do
		case "$1" in
		-o) out=$2; shift 2;;
		-t) timeout_s=$2; shift 2;;
		*) break;;
		esac
	done
	[ $# -ge 2 ] || die "usage: $0 run [-o DIR] [-t SEC] SCRIPT_A SCRIPT_B [-- ARGS...]"
	local sa sb
	sa=$(readlink -f "$1"); sb=$(readlink -f "$2"); shift 2
	[ "${1:-}" = -- ] && shift
	[ -r "$sa" ] && [ -r "$sb" ] || die "scripts must exist: $sa $sb"
	cdir=$(prepare) || exit $?
	kver=$(cat "$cdir/kver")
	if [ -z "$out" ]; then out=$(mktemp -d /tmp/guestbed.XXXXXX); fi
	mkdir -p "$out" && out=$(cd "$out" && pwd)
	rm -f "$out"/a.* "$out"/b.*
	check_paths
	write_conf a b "$sa" "$@"
	write_conf b a "$sb" "$@"
	local sockdir; sockdir=$(mktemp -d /tmp/guestbed-sock.XXXXXX)
	local sock=$sockdir/net
	local t0; t0=$(date +%s%N)
	log "run directory $out; kernel $kver; limit ${timeout_s}s per guest"
	eval "$(qemu_cmd a "stream,id=n0,server=on,addr.type=unix,addr.path=$sock")" \
		>"$out/a.qemu" 2>&1 &
	local pa=$! pb=""
	# b connects to a's socket: wait until a's qemu has created it.
	local i=0
	while [ ! -S "$sock" ] && kill -0 $pa 2>/dev/null && [ $i -lt 600 ]; do
		sleep 0.05; i=$((i + 1))
	done
	if [ -S "$sock" ]; then
		eval "$(qemu_cmd b "stream,id=n0,server=off,addr.type=unix,addr.path=$sock")" \
			>"$out/b.qemu" 2>&1 &
		pb=$!
	fi
	local qa qb=1
	wait $pa; qa=$?
	[ -e "$out/a.rc" ] || echo "qemu-exit-$qa" >"$out/a.rc"  # lets b's waits end
	if [ -n "$pb" ]; then wait $pb; qb=$?; fi
	[ -e "$out/b.rc" ] || echo "qemu-exit-$qb" >"$out/b.rc"
	rm -rf "$sockdir"
	local t1; t1=$(date +%s%N)
	local n rc fail=0 boot_fail=""
	for n in a b; do
		echo "---- guest $n: $(cat "$out/$n.qemu" 2>/dev/null | tr '\n' ' ')"
		echo "---- guest $n console (tail):"; tail -n 15 "$out/$n.console" 2>/dev/null
		echo "---- guest $n log:"; cat "$out/$n.log" 2>/dev/null
		rc=$(cat "$out/$n.rc")
		echo "---- guest $n exit: $rc"
		[ -e "$out/$n.booted" ] || boot_fail="$boot_fail $n"
		[ "$rc" = 0 ] || fail=1
	done
	local ms=$(( (t1 - t0) / 1000000 ))
	printf 'guestbed: wall time %d.%03d s\n' $((ms / 1000)) $((ms % 1000))
	if [ -n "$boot_fail" ]; then
		skip "guest(s)$boot_fail did not boot (see $out/*.console, $out/*.qemu)"
	fi
	return $fail
}

shell() {
	local name=${1:-a}
	cdir=$(prepare) || exit $?
	kver=$(cat "$cdir/kver")
	out=$(mktemp -d /tmp/guestbed.XXXXXX)
	check_paths
	write_conf "$name" none /bin/sh
	echo "GB_INTERACTIVE=1" >>"$out/$name.conf"
	log "interactive guest $name, run directory $out (at /gb); 'busybox poweroff -f' to quit"
	eval "$(qemu_cmd "$name" "user,id=n0" stdio)"
}

case "${1:-}" in
prepare) prepare;;
run) shift; run "$@";;
shell) shift; shell "$@";;
*) die "usage: $0 prepare | run [-o DIR] [-t SEC] SCRIPT_A SCRIPT_B [-- ARGS...] | shell [a|b]";;
esac
