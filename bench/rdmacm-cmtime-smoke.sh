#!/bin/sh
# SPDX-License-Identifier: MIT
# Smoke run of bench/rdmacm-cmtime.sh (test bench-rdmacm-cmtime, suite
# 'guests'): every stack - libcep, cepd, kernel, the floor - at 10
# connections, one timed round and the counting round, in one boot of the
# Soft-RoCE guests. Passes when every run completed (the bench's exit 0:
# the floor's client exits 1 unless all its connections were set up and
# released) and the summary has each stack's connect and disconnect totals
# and busy CPU; 77 when the guests cannot run.
#   rdmacm-cmtime-smoke.sh BUILD_DIR RUN_DIR
set -u
here=$(cd "$(dirname "$0")" && pwd)
build=$1
run=$2
rm -rf "$run"
mkdir -p "$run"
BENCH_ROUNDS=1 BENCH_RUN=$run GUESTBED_TIMEOUT=1500 \
	"$here/rdmacm-cmtime.sh" "$build" 10:1:300 >"$run/summary.txt" 2>&1
rc=$?
cat "$run/summary.txt"
[ $rc = 77 ] && exit 77
[ $rc = 0 ] || { echo "FAIL: the bench exited $rc"; exit 1; }
stacks=$(sed -n 's/^step  *//p' "$run/summary.txt" | head -n1 | sed 's/ratio//g')
[ -n "$stacks" ] || { echo "FAIL: no summary"; exit 1; }
case " $(echo $stacks) " in *" floor "*) ;; *) echo "FAIL: no floor in the summary"; exit 1;; esac
# every stack's column holds a number in these rows
for row in connect disconnect "busy, both guests"; do
	line=$(grep "^$row  " "$run/summary.txt" | head -n1)
	[ -n "$line" ] || { echo "FAIL: no row \"$row\""; exit 1; }
	echo "$line" | grep -q ' - ' && { echo "FAIL: a stack has no \"$row\": $line"; exit 1; }
done
grep -q "^BENCH floor n=10 r=1: floor messages .*; connections 10 released 10 failed 0" "$run/a.log" ||
	{ echo "FAIL: the floor's client did not release its 10 connections"; exit 1; }
echo "PASS"
