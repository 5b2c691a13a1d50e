#!/bin/sh
# Runs one long step of `make dev` (a build) with its output in a log, and
# says what it is doing and how far it is instead of streaming that output:
#
#   tools/progress.sh [-p PREFIX] [-u UNIT] [-n TOTAL] LOG TITLE COMMAND...
#
# It prints "PREFIX: TITLE ..." when the step starts and "PREFIX: TITLE: done
# in 1 min 12 s" when it ends. Meanwhile, on a terminal, one line updates in
# place every second with the elapsed time and the counts below; in a pipe,
# in CI (CI set) or with TERM=dumb, a plain line every PROGRESS_EVERY seconds
# (30) instead. Counts, read from the log: the Go modules downloaded (its
# "go: downloading" lines, summarized, never streamed) and, with -u, the
# log's one-word lines (the packages `go build -v` compiles) as UNIT, "of
# TOTAL" with -n. When COMMAND fails, the last PROGRESS_TAIL (25) lines of
# LOG are printed, then the log's path, and its exit status is returned.
#
# PROGRESS=plain or PROGRESS=tty chooses the mode (default: auto).
set -u

prefix=progress
unit=
total=
while getopts p:u:n: opt; do
	case $opt in
	p) prefix=$OPTARG ;;
	u) unit=$OPTARG ;;
	n) total=$OPTARG ;;
	*) exit 2 ;;
	esac
done
shift $((OPTIND - 1))
if [ $# -lt 3 ]; then
	echo "usage: tools/progress.sh [-p PREFIX] [-u UNIT] [-n TOTAL] LOG TITLE COMMAND..." >&2
	exit 2
fi
log=$1
title=$2
shift 2

mode=${PROGRESS:-auto}
if [ "$mode" = auto ]; then
	mode='plain'
	if [ -t 1 ] && [ -z "${CI:-}" ] && [ "${TERM:-dumb}" != dumb ]; then mode='tty'; fi
fi
every=${PROGRESS_EVERY:-30}

# 75: 1 min 15 s; under a minute: 42 s.
duration() {
	if [ "$1" -ge 60 ]; then echo "$(($1 / 60)) min $(($1 % 60)) s"; else echo "$1 s"; fi
}

# counts prints what the log shows so far: ", 812 of 2080 packages compiled,
# 312 modules downloaded" (each part only when there is something to count);
# "counts final" leaves out the total.
counts() {
	c=
	if [ -n "$unit" ]; then
		n=$(grep -cE '^[A-Za-z0-9_.~+-]+(/[A-Za-z0-9_.~+-]+)*$' "$log" 2>/dev/null)
		if [ -n "$total" ] && [ "${1:-}" != final ]; then
			c=", ${n:-0} of $total $unit"
		elif [ "${n:-0}" -gt 0 ]; then
			c=", $n $unit"
		fi
	fi
	m=$(grep -c '^go: downloading ' "$log" 2>/dev/null)
	case ${m:-0} in 0) ;; 1) c="$c, 1 module downloaded" ;; *) c="$c, $m modules downloaded" ;; esac
	printf '%s' "$c"
}

# The terminal's width, so that the line updated in place never wraps.
cols=80
if [ "$mode" = tty ]; then
	cols=$(stty size 2>/dev/null </dev/tty | cut -d' ' -f2)
	case $cols in '' | *[!0-9]*) cols=80 ;; esac
	if [ "$cols" -lt 20 ]; then cols=80; fi
fi

status() {
	line="$prefix: $title: $(duration "$(($(date +%s) - t0))")$(counts)"
	if [ "$mode" = tty ]; then
		printf '\r\033[K%s' "$(printf '%s' "$line" | cut -c "1-$((cols - 1))")"
	else
		echo "$line"
	fi
}

# clear_line ends the line updated in place, before any other line is printed.
clear_line() {
	if [ "$mode" = tty ]; then printf '\r\033[K'; fi
}

mkdir -p "$(dirname "$log")"
: >"$log"
t0=$(date +%s)
echo "$prefix: $title ..."
# The ticker sleeps a second at a time, its sleep's output closed: killed, it
# stops at once, and the sleep left behind holds no pipe of the caller's.
(
	n=0
	if [ "$mode" = tty ]; then status; fi
	while sleep 1 >/dev/null 2>&1; do
		n=$((n + 1))
		if [ "$mode" = tty ] || [ $((n % every)) = 0 ]; then status; fi
	done
) &
ticker=$!
stop_ticker() {
	kill "$ticker" 2>/dev/null
	wait "$ticker" 2>/dev/null
	clear_line
}
trap 'stop_ticker; echo "$prefix: $title: interrupted after $(duration "$(($(date +%s) - t0))") (log: $log)"; exit 130' INT
trap 'stop_ticker; exit 143' TERM

if "$@" >"$log" 2>&1; then st=0; else st=$?; fi
stop_ticker
trap - INT TERM
elapsed=$(duration "$(($(date +%s) - t0))")
if [ "$st" = 0 ]; then
	echo "$prefix: $title: done in $elapsed$(counts final)"
	exit 0
fi
tail=${PROGRESS_TAIL:-25}
echo "$prefix: $title: failed (exit $st) after $elapsed; the last $tail lines of $log:"
tail -n "$tail" "$log" | sed 's/^/    /'
echo "$prefix: $title: failed; its whole log is $log"
exit "$st"
