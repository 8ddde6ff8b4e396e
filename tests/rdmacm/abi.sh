#!/bin/sh
# SPDX-License-Identifier: MIT
# libcep's librdmacm.so.1 against Debian's librdmacm 44 (docs/rdmacm.md):
#  1. the same functions with the same symbol versions (RDMACM_1.0..1.3) as
#     `objdump -T` lists for the system library, the same version
#     definitions, SONAME librdmacm.so.1, and nothing else exported;
#  2. (LOAD=1) every rdmacm-utils program loads on it with BIND_NOW, as
#     Debian builds them (a missing symbol or version fails at load), and
#     LD_LIBRARY_PATH picks this library, not the system's.
#   abi.sh LIBDIR [LOAD]
# Exit 0 pass, 1 fail, 77 skip (no system librdmacm or binutils).
set -u
dir=$1
load=${2:-0}
ours=$dir/librdmacm.so.1
sys=$(ldconfig -p 2>/dev/null | awk '$1 == "librdmacm.so.1" { print $NF; exit }')
[ -n "$sys" ] && [ -e "$sys" ] || { echo "abi.sh: SKIP: no system librdmacm.so.1 (package librdmacm1)" >&2; exit 77; }
command -v objdump >/dev/null && command -v readelf >/dev/null ||
	{ echo "abi.sh: SKIP: objdump/readelf missing (binutils)" >&2; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
funcs() { objdump -T "$1" | awk '/ DF \.text/ { print $(NF-1), $NF }' | sort; }
vers() { objdump -T "$1" | awk '/ DO \*ABS\*/ { print $NF }' | sort; }
funcs "$sys" >"$tmp/sys.f"
funcs "$ours" >"$tmp/ours.f"
if ! diff -u "$tmp/sys.f" "$tmp/ours.f"; then
	echo "FAIL: exported functions or their versions differ (- $sys, + ours)"
	fail=1
else
	echo "ok: $(wc -l <"$tmp/ours.f") functions, each with the system library's version"
fi
vers "$sys" >"$tmp/sys.v"
vers "$ours" >"$tmp/ours.v"
diff -u "$tmp/sys.v" "$tmp/ours.v" || { echo "FAIL: version definitions differ"; fail=1; }
extra=$(objdump -T "$ours" | awk 'NR > 4 && NF && !/\*UND\*/ && !/ DF \.text/ && !/\*ABS\*/')
[ -z "$extra" ] || { echo "FAIL: other symbols exported:"; echo "$extra"; fail=1; }
soname=$(readelf -d "$ours" | sed -n 's/.*Library soname: \[\(.*\)\]/\1/p')
[ "$soname" = librdmacm.so.1 ] || { echo "FAIL: SONAME '$soname'"; fail=1; }
if [ "$load" = 1 ]; then
	n=0
	for p in rping ucmatose udaddy rdma_server rdma_client rdma_xserver rdma_xclient \
		cmtime mckey rstream rcopy riostream udpong; do
		bin=$(command -v $p) || continue
		n=$((n + 1))
		got=$(LD_LIBRARY_PATH=$dir LD_TRACE_LOADED_OBJECTS=1 "$bin" 2>&1 |
			sed -n 's/^[[:space:]]*librdmacm\.so\.1 => \([^ ]*\).*/\1/p')
		[ "$(readlink -f "$got")" = "$(readlink -f "$ours")" ] ||
			{ echo "FAIL: $p resolves librdmacm.so.1 to '$got'"; fail=1; }
		# An unknown option: usage and exit, after the loader bound every
		# symbol (BIND_NOW).
		out=$(LD_LIBRARY_PATH=$dir LD_BIND_NOW=1 "$bin" -Z 2>&1)
		case "$out" in
		*"symbol lookup error"*|*"version \`RDMACM"*|*"error while loading"*)
			echo "FAIL: $p does not load: $out"; fail=1;;
		esac
	done
	[ $n -gt 0 ] || { echo "abi.sh: SKIP: rdmacm-utils not installed (load check)" >&2; exit 77; }
	echo "ok: $n rdmacm-utils programs load on it with BIND_NOW"
fi
exit $fail
