#!/bin/sh
# SPDX-License-Identifier: MIT
# The soak tier (opt-in, docs/stress.md "Soak"): builds a release build in
# build-soak and runs cep-soak, cep-stress's faults scenario and a
# connection storm at 20% loss side by side, for 10 minutes by default,
# sampling RSS, live CEPs, ids and armed timers every second; it fails if
# any of them trends upward once the load is steady. The samples go to
# build-soak/soak.csv. Arguments are passed to cep-soak
# (e.g. --duration 3600).
set -eu
cd "$(dirname "$0")/.."
dir=build-soak
if [ ! -f "$dir/build.ninja" ]; then
	CC=${CC:-gcc} meson setup "$dir" -Dbuildtype=release >/dev/null
fi
nice -n 10 ninja -C "$dir" stress/soak/cep-soak
exec "$dir/stress/soak/cep-soak" --csv "$dir/soak.csv" "$@"
