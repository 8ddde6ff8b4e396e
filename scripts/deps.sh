#!/bin/sh
# SPDX-License-Identifier: MIT
# Install what libcep needs to build, test and demo, from Debian only.
# Idempotent: installs only packages that are missing. Must run as root.
set -eu
PKGS="meson ninja-build pkg-config gcc clang libclang-rt-14-dev llvm \
      liburcu-dev libck-dev libibumad-dev libibverbs-dev \
      spin tshark gnuplot-nox python3 \
      qemu-system-x86 busybox-static kmod iproute2 ibverbs-utils \
      ibverbs-providers rdmacm-utils librdmacm-dev libfabric-bin cpio \
      pandoc man-db abigail-tools debhelper dpkg-dev build-essential lintian \
      ibsim-utils opensm infiniband-diags \
      perftest qperf fio tgt libiscsi-bin ucx-utils"
missing=""
for p in $PKGS; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
	echo "deps: installing:$missing" >&2
	export DEBIAN_FRONTEND=noninteractive
	# tshark asks whether non-root users may capture: answer no, non-interactively.
	echo 'wireshark-common wireshark-common/install-setuid boolean false' | debconf-set-selections
	apt-get update -qq
	apt-get install -y -qq --no-install-recommends $missing >/dev/null
fi
