# SPDX-License-Identifier: MIT
# Helpers for scripts running inside a guest of guestbed.sh (source "$GB_LIB").
# Readiness between guests is explicit: gb_signal creates a flag file in the
# shared run directory, gb_wait polls for the peer's flag and gives up early
# when the peer has already exited (its .rc file exists) or at a deadline.

# gb_signal FLAG: tell the peer that FLAG holds (e.g. "rxe-up").
gb_signal() {
	echo "$(date +%s.%N)" >"$GB_SHARE/$GB_NAME.$1.tmp" &&
		mv "$GB_SHARE/$GB_NAME.$1.tmp" "$GB_SHARE/$GB_NAME.$1"
}

# gb_wait FLAG [SECONDS]: wait until the peer signalled FLAG (default 120 s).
gb_wait() {
	local end=$(( $(date +%s) + ${2:-120} ))
	while [ ! -e "$GB_SHARE/$GB_PEER.$1" ]; do
		if [ -e "$GB_SHARE/$GB_PEER.rc" ]; then
			echo "gb_wait $1: peer $GB_PEER exited ($(cat "$GB_SHARE/$GB_PEER.rc"))" >&2
			return 1
		fi
		if [ "$(date +%s)" -ge "$end" ]; then
			echo "gb_wait $1: timed out" >&2
			return 1
		fi
		sleep 0.02
	done
}

# gb_wait_tcp_listen PORT [SECONDS]: wait until a local socket listens on PORT.
gb_wait_tcp_listen() {
	local hex end=$(( $(date +%s) + ${2:-60} ))
	hex=$(printf '%04X' "$1")
	until grep -qE "^ *[0-9]+: [0-9A-F]+:$hex [0-9A-F]+:[0-9A-F]+ 0A " /proc/net/tcp /proc/net/tcp6 2>/dev/null; do
		[ "$(date +%s)" -ge "$end" ] && { echo "gb_wait_tcp_listen $1: timed out" >&2; return 1; }
		sleep 0.02
	done
}

# gb_rxe_up [MODULE...]: load rxe and the user-space access modules (plus any
# extra MODULE, e.g. ib_cm), create rxe0 on eth0, wait until port 1 is ACTIVE
# and GID index 1 holds the RoCE v2 GID of our IPv4 address.
gb_rxe_up() {
	local m
	for m in rdma_rxe ib_uverbs ib_umad "$@"; do
		modprobe "$m" || { echo "gb_rxe_up: modprobe $m failed" >&2; return 1; }
	done
	rdma link add rxe0 type rxe netdev eth0 || return 1
	local p=/sys/class/infiniband/rxe0/ports/1 end=$(( $(date +%s) + 30 ))
	until grep -q ACTIVE "$p/state" 2>/dev/null &&
		grep -q "^0000:0000:0000:0000:0000:ffff:" "$p/gids/1" 2>/dev/null; do
		if [ "$(date +%s)" -ge "$end" ]; then
			# what was missing: the port's state, its IPv4 GID, the
			# netdev's link and address (seen once in CI, 2026-12-05)
			echo "gb_rxe_up: rxe0 port not ready after 30 s:" \
				"state '$(cat "$p/state" 2>/dev/null)'" \
				"phys_state '$(cat "$p/phys_state" 2>/dev/null)'" \
				"gid[1] '$(cat "$p/gids/1" 2>/dev/null)';" \
				"$(ip -br link show eth0 2>&1); $(ip -br addr show eth0 2>&1)" >&2
			return 1
		fi
		sleep 0.02
	done
}

# gb_gid IDX: this guest's GID at index IDX on rxe0 port 1.
gb_gid() { cat "/sys/class/infiniband/rxe0/ports/1/gids/$1"; }

# gb_wait_cm_listen PORT [PID] [SECONDS]: wait until the kernel's rdma_cm
# listens on PORT (its cm_id in `rdma resource`); fails early when process
# PID has exited, or at the deadline (default 60 s).
gb_wait_cm_listen() {
	local end=$(( $(date +%s) + ${3:-60} ))
	until rdma resource show cm_id 2>/dev/null | grep -q "state LISTEN.*:$1"; do
		if [ -n "${2:-}" ] && ! kill -0 "$2" 2>/dev/null; then return 1; fi
		[ "$(date +%s)" -ge "$end" ] && return 1
		sleep 0.02
	done
}

# gb_start_cepd TRIES LOG CEPD ARGS...: start CEPD ARGS -v in the background
# (its output in LOG, its pid in cepd_pid) and wait until it answers at its
# default socket (CEPD --stats), polling every 20 ms up to TRIES times; on
# failure show LOG and return 1.
gb_start_cepd() {
	local tries=$1 log=$2 bin=$3 i=0
	shift 3
	"$bin" "$@" -v >"$log" 2>&1 &
	cepd_pid=$!
	until "$bin" --stats >/dev/null 2>&1; do
		i=$((i + 1))
		if [ $i -gt "$tries" ] || ! kill -0 $cepd_pid 2>/dev/null; then
			cat "$log"
			echo "cepd did not come up"
			return 1
		fi
		sleep 0.02
	done
}
