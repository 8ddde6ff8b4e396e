#!/bin/sh
# SPDX-License-Identifier: MIT
# Install what is missing, then build and run libcep's whole test suite
# three ways: plain gcc with -Werror, ThreadSanitizer, and
# AddressSanitizer + UndefinedBehaviorSanitizer (clang, with the libFuzzer
# targets). Any failure or sanitizer report fails the run. The plain build
# also checks the ABI against abi/libcep.abi and the man pages (suite api),
# runs the SA client against OpenSM on ibsim (suite ib)
# and builds the Debian packages, then the quick start against them (pkg).
# Environment: CEP_TEST_BUILDS="plain tsan asan" to choose builds,
# CEP_TEST_ARGS for extra `meson test` arguments.
set -eu
cd "$(dirname "$0")/.."
./scripts/deps.sh
builds=${CEP_TEST_BUILDS:-"plain tsan asan"}
jobs=$(nproc)
status=0
summary=""
for b in $builds; do
	dir=build-test-$b
	case $b in
	plain) cc=gcc; opts="-Dwerror=true -Dbuildtype=debugoptimized"; skip="" ;;
	tsan)  cc=clang; opts="-Dwerror=true -Db_sanitize=thread -Db_lundef=false"; skip="--no-suite guests --no-suite bench --no-suite model --no-suite ib" ;;
	asan)  cc=clang; opts="-Dwerror=true -Db_sanitize=address,undefined -Db_lundef=false -Dfuzz=true"; skip="--no-suite guests --no-suite bench --no-suite model --no-suite ib" ;;
	*) echo "unknown build $b" >&2; exit 2 ;;
	esac
	echo "=== build $b ($cc $opts)"
	if [ -f "$dir/build.ninja" ]; then
		meson setup --reconfigure "$dir" $opts >/dev/null
	else
		CC=$cc meson setup "$dir" $opts >/dev/null
	fi
	ninja -C "$dir" -j"$jobs"
	echo "=== test $b"
	# shellcheck disable=SC2086
	if ! meson test -C "$dir" --print-errorlogs --num-processes "$jobs" $skip ${CEP_TEST_ARGS:-}; then
		status=1
	fi
	summary="$summary $dir/meson-logs/testlog.json"
done
# One closing line over all builds, after a line for each test that did
# not pass (build, name, result): the end of the log names them, where a
# log cut to its tail would otherwise lose which one failed.
python3 - $summary <<'PY'
import json, sys
ok = fail = skip = 0
for path in sys.argv[1:]:
    try:
        lines = open(path).read().splitlines()
    except OSError:
        continue
    build = path.split("/")[0]
    for line in lines:
        t = json.loads(line)
        r = t.get("result")
        if r in ("OK", "EXPECTEDFAIL"):
            ok += 1
        elif r == "SKIP":
            skip += 1
        else:
            fail += 1
            print(f"not passed: {build} {t.get('name')} {r}")
print(f"{ok} passed, {fail} failed, {skip} skipped")
PY
exit $status
