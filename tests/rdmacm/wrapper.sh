#!/bin/sh
# SPDX-License-Identifier: MIT
# cep-rdmacm (tools/cep-rdmacm) as a user meets it on a machine that is not
# ready: a program that does not exist gets one line that says so (no
# shell "exec" error with a line number, exit 127 as a shell's); a machine
# without an RDMA device, without /dev/infiniband/umad*, or with ib_cm
# loaded gets what libcep needs (rdma link add ..., ib_umad, rmmod ib_cm)
# before the program runs; the program's exit status comes back as it is.
# The machines are faked with CEP_RDMACM_SYSROOT.
# Usage: wrapper.sh CEP_RDMACM
set -u
w=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0 n=0
check() { # what, condition...
	what=$1; shift
	n=$((n + 1))
	if ! "$@"; then
		echo "FAIL: $what"
		sed 's/^/  stderr: /' "$tmp/err"
		fails=$((fails + 1))
	fi
}
has() { grep -q -- "$1" "$tmp/err"; }
hasnt() { ! grep -q -- "$1" "$tmp/err"; }
run() { # expected status, command...
	want=$1; shift
	"$@" >"$tmp/out" 2>"$tmp/err"
	[ $? -eq "$want" ]
}

check "/nonexistent: exit 127" run 127 "$w" /nonexistent
check "/nonexistent: one plain line" has "^cep-rdmacm: /nonexistent: no such file$"
check "/nonexistent: no shell exec error" hasnt "exec\|line [0-9]"
check "not in PATH: exit 127" run 127 "$w" cep-no-such-program-here
check "not in PATH: says so" has "cep-no-such-program-here: no such program in PATH"
printf 'data\n' >"$tmp/data" && chmod 644 "$tmp/data"
check "not executable: exit 126" run 126 "$w" "$tmp/data"
check "not executable: says so" has "data: not an executable program$"

# no device at all
mkdir -p "$tmp/none"
check "no device: the program runs" env CEP_RDMACM_SYSROOT="$tmp/none" sh -c \
	'"$0" sh -c "exit 3" 2>"$1/err"; [ $? -eq 3 ]' "$w" "$tmp"
check "no device: says how to make a port" has "rdma link add rxe0 type rxe netdev IF"
# a device without umad
mkdir -p "$tmp/noumad/sys/class/infiniband/rxe0"
check "no umad: runs" run 0 env CEP_RDMACM_SYSROOT="$tmp/noumad" "$w" true
check "no umad: names the device node and the module" has "/dev/infiniband/umad\*: .*modprobe ib_umad"
# a ready machine: nothing to say
mkdir -p "$tmp/ready/sys/class/infiniband/rxe0" "$tmp/ready/dev/infiniband"
: >"$tmp/ready/dev/infiniband/umad0"
chmod 666 "$tmp/ready/dev/infiniband/umad0"
check "ready: runs" run 0 env CEP_RDMACM_SYSROOT="$tmp/ready" "$w" true
check "ready: says nothing" test ! -s "$tmp/err"
# a umad device the user cannot open (root opens anything: only as a user)
if [ "$(id -u)" != 0 ]; then
	chmod 600 "$tmp/ready/dev/infiniband/umad0"
	cp -r "$tmp/ready" "$tmp/perm"
	chmod 000 "$tmp/perm/dev/infiniband/umad0"
	check "no access: runs" run 0 env CEP_RDMACM_SYSROOT="$tmp/perm" "$w" true
	check "no access: says so" has "umad0 is not readable and writable"
fi
# ib_cm loaded
mkdir -p "$tmp/ready/sys/module/ib_cm"
check "ib_cm: runs" run 0 env CEP_RDMACM_SYSROOT="$tmp/ready" "$w" true
check "ib_cm: says to unload it" has "rmmod rdma_ucm rdma_cm iw_cm ib_cm"
# the library's directory reaches the program
check "LD_LIBRARY_PATH" run 0 env CEP_RDMACM_SYSROOT="$tmp/ready" "$w" sh -c \
	'case $LD_LIBRARY_PATH in "$0"*) exit 0;; *) exit 1;; esac' "$("$w" --libdir)"
echo "$((n - fails)) passed, $fails failed"
[ "$fails" -eq 0 ]
