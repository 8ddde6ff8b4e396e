#!/bin/sh
# SPDX-License-Identifier: MIT
# libcep's ABI against the committed baseline abi/libcep.abi, with
# libabigail (abidw/abidiff). Only what include/cep defines counts: types
# defined elsewhere are dropped on both sides, so private layouts (struct
# cep, struct cep_cm_id ...) may change freely. Any difference fails, a
# compatible one (a function added) as well as an incompatible one, so the
# baseline always equals the released ABI and changes only on purpose:
# ./scripts/abi-update.sh (docs/abi.md).
# Usage: check_abi.sh check|dump SOURCE_ROOT BUILD_ROOT LIBCEP_SO [OUT]
set -eu
mode=$1 src=$2 build=$3 lib=$4
baseline=$src/abi/libcep.abi

dump() {
	abidw --no-corpus-path --no-comp-dir-path --no-show-locs \
		--drop-private-types \
		--headers-dir "$src/include/cep" --headers-dir "$build/include/cep" \
		--out-file "$1" "$lib"
}

case $mode in
dump)
	dump "${5:-$baseline}"
	echo "wrote ${5:-$baseline}"
	;;
check)
	current=$build/abi-current.abi
	dump "$current"
	set +e
	abidiff "$baseline" "$current"
	rc=$?
	set -e
	if [ $((rc & 8)) -ne 0 ]; then
		echo "FAIL: incompatible ABI change against abi/libcep.abi (above)." >&2
	elif [ $((rc & 4)) -ne 0 ]; then
		echo "FAIL: the ABI changed (compatibly, above). If that is intended (a new" >&2
		echo "function in a new stanza of src/libcep.map, with its man page), run" >&2
		echo "./scripts/abi-update.sh and commit abi/libcep.abi." >&2
	elif [ $rc -ne 0 ]; then
		echo "FAIL: abidiff could not compare (exit $rc)" >&2
	else
		echo "ABI equals abi/libcep.abi ($(grep -c '<elf-symbol ' "$current") symbols)"
	fi
	exit $rc
	;;
*)
	echo "usage: $0 check|dump SOURCE_ROOT BUILD_ROOT LIBCEP_SO [OUT]" >&2
	exit 2
	;;
esac
