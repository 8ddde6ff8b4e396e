# SPDX-License-Identifier: MIT
# The summary of bench/rdmacm-cmtime.sh for one count: reads the guests'
# logs (lines "BENCH <stack> n=<n> r=<round>: ..." of
# bench/rdmacm-cmtime-guest.sh) and prints, for each stack:
#   1. cmtime's total ms per step, median of the timed rounds (min-max),
#      ratio = kernel / stack;
#   2. CPU per connection in the timed rounds, ms, median (min-max), ratio =
#      stack / kernel: busy (user + system + irq ticks of /proc/stat) of
#      both guests and of each; the client's and the server's process (user
#      + system, all its threads); each cepd; and each "above the floor":
#      the stack's minus the floor's of the same round, ratio = (stack -
#      floor) / (kernel - floor), what a CM costs;
#   3. context switches and system calls per connection of each process,
#      from the counting round (perf stat), ratio = stack / kernel.
# Usage: awk -v n=COUNT -v stacks="libcep cepd kernel floor" -f THIS a.log b.log
function sort_list(s, v,   k, i, j, t) {
	k = split(s, v, " ")
	for (i = 1; i <= k; i++)
		for (j = i + 1; j <= k; j++)
			if (v[j] + 0 < v[i] + 0) { t = v[i]; v[i] = v[j]; v[j] = t }
	return k
}
# median of a blank-separated list; its min and max into LO and HI
function median(s,   v, k) {
	k = sort_list(s, v)
	if (k == 0) { LO = HI = ""; return "" }
	LO = v[1]; HI = v[k]
	return k % 2 ? v[(k + 1) / 2] : (v[k / 2] + v[k / 2 + 1]) / 2
}
# the values of metric m of stack cm over the timed rounds, per round
function rounds_of(m, cm,   r, l) {
	l = ""
	for (r = 1; r <= maxr; r++)
		if ((m, cm, r) in val)
			l = l " " val[m, cm, r]
	return l
}
# the same less the floor's of the same round
function above_floor(m, cm,   r, l) {
	l = ""
	for (r = 1; r <= maxr; r++)
		if ((m, cm, r) in val && (m, "floor", r) in val)
			l = l " " (val[m, cm, r] - val[m, "floor", r])
	return l
}
function cell(x, lo, hi, prec) {
	if (x == "")
		return sprintf(" %25s", "-")
	if (prec == 0)
		return sprintf(" %9.1f (%6.0f-%6.0f)", x, lo, hi)
	return sprintf(" %9.2f (%6.2f-%6.2f)", x, lo, hi)
}
function ratio(a, b) {
	return sprintf(" %7s", (a != "" && b != "" && b + 0 > 0) ? sprintf("%.2f", a / b) : "-")
}
function header(title,   j) {
	printf "%-24s", title
	for (j = 1; j <= ns; j++)
		printf " %25s%s", st[j], (st[j] == "kernel" ? "" : "   ratio")
	printf "\n"
}
# one row of timed-round CPU: metric m, its "above the floor" row when af
function cpu_row(title, m, af,   j, x, k, xl, xh, kf, xf) {
	k = median(rounds_of(m, "kernel"))
	printf "%-24s", title
	for (j = 1; j <= ns; j++) {
		x = median(rounds_of(m, st[j]))
		printf "%s", cell(x, LO, HI, 2)
		if (st[j] != "kernel")
			printf "%s", ratio(x, k)
	}
	printf "\n"
	if (!af)
		return
	kf = median(above_floor(m, "kernel"))
	printf "%-24s", "  above the floor"
	for (j = 1; j <= ns; j++) {
		xf = st[j] == "floor" ? "" : median(above_floor(m, st[j]))
		printf "%s", cell(xf, LO, HI, 2)
		if (st[j] != "kernel")
			printf "%s", ratio(xf, kf)
	}
	printf "\n"
}
# one row of the counting round: metric m per connection
function count_row(title, m,   j, x, k) {
	k = (m, "kernel") in cnt ? cnt[m, "kernel"] : ""
	printf "%-24s", title
	for (j = 1; j <= ns; j++) {
		x = (m, st[j]) in cnt ? cnt[m, st[j]] : ""
		printf "%s", x == "" ? sprintf(" %25s", "-") : sprintf(" %25.1f", x)
		if (st[j] != "kernel")
			printf "%s", ratio(x, k)
	}
	printf "\n"
}
$1 == "BENCH" && $3 == ("n=" n) {
	cm = $2; r = $4; sub(/^r=/, "", r); sub(/:$/, "", r)
	line = $0; sub("^BENCH [a-z]+ n=[0-9]+ r=[0-9a-z]+: ", "", line)
	split(line, g, " ")
	if (r == "count") {
		# "client perf context-switches X", "a cepd perf raw_syscalls:sys_enter X"
		who = g[1]; ev = g[3]; x = g[4]
		if (g[2] == "cepd" && g[3] == "perf") { who = "cepd"; ev = g[4]; x = g[5] }
		else if (g[2] != "perf") next
		if (ev == "context-switches") key = who "-cs"
		else if (ev == "raw_syscalls:sys_enter") key = who "-sc"
		else next
		cnt[key, cm] += x / n
		next
	}
	if (r !~ /^[0-9]+$/) next
	if (r + 0 > maxr) maxr = r + 0
	# "client|server guest cpu user U system S irq+softirq I idle D (ticks)", USER_HZ 100
	if (g[2] == "guest" && g[3] == "cpu") {
		b = (g[5] + g[7] + g[9]) * 10 / n
		val["busy", cm, r] += b
		val[g[1] "-busy", cm, r] += b
		next
	}
	# "client cpu user U s system S s ...", "server cpu user U s system S s"
	if ((g[1] == "client" || g[1] == "server") && g[2] == "cpu" && g[3] == "user") {
		val[g[1] "-proc", cm, r] += (g[4] + g[7]) * 1000 / n
		next
	}
	# "a cepd cpu user U s system S s"
	if (g[2] == "cepd" && g[3] == "cpu" && g[4] == "user") {
		val["cepd", cm, r] += (g[5] + g[8]) * 1000 / n
		next
	}
	# "floor messages sent S received R retransmitted X repeated Y; ..."
	if (g[1] == "floor" && g[2] == "messages") {
		retx += g[8]
		floor_runs++
		next
	}
	if (line ~ /cpu|librdmacm|cepd| perf /) next
	split(line, f, ":")
	step = f[1]; gsub(/ +$/, "", step)
	# total ms first; cmtime may print max and min run together
	# ("103505.50103105224.00"): three columns then, not four
	if (split(f[2], v, " ") >= 3 && v[1] ~ /^[0-9.]+$/ && step != "step") {
		t[cm, step] = t[cm, step] " " v[1]
		if (!(step in seen)) { seen[step] = 1; order[++k] = step }
	}
}
END {
	ns = split(stacks, st, " ")
	print "n=" n ": cmtime total ms per step, median of the timed rounds (min-max); ratio = kernel / stack"
	header("step")
	for (i = 1; i <= k; i++) {
		s = order[i]; a = median(t["kernel", s])
		printf "%-24s", s
		for (j = 1; j <= ns; j++) {
			b = median(t[st[j], s])
			printf "%s", cell(b, LO, HI, 0)
			if (st[j] != "kernel")
				printf "%s", ratio(a, b)
		}
		printf "\n"
	}
	if (floor_runs)
		printf "(the floor retransmitted %d messages in its %d runs: %s)\n", retx, floor_runs,
			retx ? "some were lost, its figures include the waits" : "exactly 5 per connection"
	print ""
	print "n=" n ": CPU ms per connection, timed rounds, median (min-max); ratio = stack / kernel;"
	print "  above the floor = stack - floor in the same round, ratio = (stack - floor) / (kernel - floor)"
	header("cpu")
	cpu_row("busy, both guests", "busy", 1)
	cpu_row("busy, client guest", "client-busy", 0)
	cpu_row("busy, server guest", "server-busy", 0)
	cpu_row("client process", "client-proc", 1)
	cpu_row("server process", "server-proc", 1)
	cpu_row("cepd, both guests", "cepd", 0)
	print ""
	print "n=" n ": per connection, counting round (perf stat with the raw_syscalls tracepoint: not timed); ratio = stack / kernel"
	header("count")
	count_row("server context switches", "server-cs")
	count_row("server system calls", "server-sc")
	count_row("client context switches", "client-cs")
	count_row("client system calls", "client-sc")
	count_row("cepd context switches", "cepd-cs")
	count_row("cepd system calls", "cepd-sc")
}
