#!/bin/sh
# SPDX-License-Identifier: MIT
# Check tests/model/binding.pml exhaustively with spin (safety: assertions
# and invalid end states). Exit 0 when no violation is found; with
# --expect-fail NAME (built with -DNAME) exit 0 only if one is found.
# Exit 77 (meson: skipped) only if spin is missing.
#
# usage: run-spin.sh [--expect-fail NAME] [--trail] [-DOTHER ...]
#   CEP_SPIN_KEEP=dir  keep pan, its output and any trail in dir
set -u

here=$(cd "$(dirname "$0")" && pwd)
model="$here/binding.pml"
expect_fail=
show_trail=0
defines=

while [ $# -gt 0 ]; do
	case "$1" in
	--expect-fail)
		[ $# -ge 2 ] || { echo "run-spin: --expect-fail needs a name" >&2; exit 2; }
		expect_fail=$2
		defines="$defines -D$2"
		shift 2 ;;
	--trail) show_trail=1; shift ;;
	-D*) defines="$defines $1"; shift ;;
	*) echo "usage: run-spin.sh [--expect-fail NAME] [--trail] [-DNAME ...]" >&2; exit 2 ;;
	esac
done

if ! command -v spin >/dev/null 2>&1; then
	echo "run-spin: spin not found (Debian package 'spin'): skipped"
	exit 77
fi
cc=${CC:-gcc}
command -v "$cc" >/dev/null 2>&1 || cc=cc
if ! command -v "$cc" >/dev/null 2>&1; then
	echo "run-spin: no C compiler to build pan" >&2
	exit 1
fi

if [ -n "${CEP_SPIN_KEEP:-}" ]; then
	work=$CEP_SPIN_KEEP
	mkdir -p "$work" || exit 1
else
	work=$(mktemp -d "${TMPDIR:-/tmp}/cep-spin.XXXXXX") || exit 1
	trap 'rm -rf "$work"' EXIT INT TERM
fi
cp "$model" "$work/binding.pml" || exit 1
cd "$work" || exit 1
rm -f binding.pml.trail

# spin passes -D to cpp. pan: -DSAFETY (no cycle search), -DCOLLAPSE
# (state compression), -DMEMLIM caps memory at 1 GiB on shared machines.
# shellcheck disable=SC2086
if ! spin $defines -a binding.pml >spin.log 2>&1; then
	cat spin.log >&2
	echo "run-spin: spin -a failed" >&2
	exit 1
fi
if ! "$cc" -w -O2 -DSAFETY -DCOLLAPSE -DMEMLIM=1024 -o pan pan.c 2>cc.log; then
	cat cc.log >&2
	echo "run-spin: compiling pan failed" >&2
	exit 1
fi
./pan -m100000 -w22 -n >pan.out 2>&1
pan_rc=$?

errors=$(sed -n 's/.*errors: *\([0-9][0-9]*\).*/\1/p' pan.out | tail -n 1)
incomplete=0
grep -q -e 'Search not completed' -e 'out of memory' -e 'max search depth too small' pan.out &&
	incomplete=1

echo "run-spin: model $model${defines:+ with$defines}"
grep -E 'State-vector|states, stored|states, matched|transitions \(|total actual memory|elapsed time' pan.out |
	sed 's/^[[:space:]]*/  /'
grep -E '^pan:[0-9]+: |^pan: (invalid end state|out of memory)' pan.out | sed 's/^/  /'

if [ -z "$errors" ]; then
	cat pan.out >&2
	echo "run-spin: could not read pan's result (exit $pan_rc)" >&2
	exit 1
fi

if [ "$errors" -gt 0 ] && [ -f binding.pml.trail ]; then
	# Replay the counterexample: the model's printf narration (which
	# process did what), or every step with --trail.
	# shellcheck disable=SC2086
	if [ "$show_trail" = 1 ]; then
		spin $defines -t -p binding.pml >trail.txt 2>&1
	else
		spin $defines -t binding.pml >trail.txt 2>&1
	fi
	echo "  counterexample (binding 0 = INVALID, 255 = RESERVED; cep c has comm ID c+1):"
	if [ "$show_trail" = 1 ]; then
		cat trail.txt
	else
		grep -v -e '^[[:space:]]*$' -e 'processes created' -e '^[[:space:]]*[0-9]*:[[:space:]]*proc ' \
			-e '^#processes' -e '^[[:space:]]*[a-z_]*\(\[[0-9]*\]\)\{0,1\} = ' trail.txt
	fi | sed 's/^[[:space:]]*/    /'
fi

if [ -n "$expect_fail" ]; then
	if [ "$errors" -gt 0 ]; then
		echo "run-spin: PASS: planted $expect_fail found ($errors violation)"
		exit 0
	fi
	echo "run-spin: FAIL: planted $expect_fail not detected"
	exit 1
fi
if [ "$errors" -gt 0 ]; then
	echo "run-spin: FAIL: $errors violation(s)"
	exit 1
fi
if [ "$incomplete" = 1 ]; then
	echo "run-spin: FAIL: search incomplete (memory or depth limit)"
	exit 1
fi
echo "run-spin: PASS: no violation in the full state space"
exit 0
