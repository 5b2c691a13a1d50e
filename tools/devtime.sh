#!/usr/bin/env bash
# Times `make dev` until its 3 nodes are initialized (a providerID, no
# uninitialized taint): first on a fresh machine's caches (a clean clone of
# this repository's HEAD, with HOME, GOMODCACHE, GOCACHE and XDG_CACHE_HOME
# pointed at empty folders), then again on the caches that run left.
#
#   tools/devtime.sh [WORKDIR]     (default /tmp/outrigger-devtime; removed first)
#   tools/devtime.sh --warm        only the warm run: `make dev` in this checkout,
#                                  on the caller's own caches (its log in /tmp)
#
# Each run also gives the time to "Outrigger is running" in make dev's output.
#
# It polls with KUBECTL (default: the kubectl of the caller's own control
# plane cache, which `make controlplane` builds), so that the fresh run's
# own kubectl, built in the background, is not waited for.
set -u
repo=$(git -C "$(dirname "$0")" rev-parse --show-toplevel)
warm_only=
if [ "${1:-}" = --warm ]; then
	warm_only=1
	shift
fi
work=${1:-/tmp/outrigger-devtime}
KUBECTL=${KUBECTL:-${XDG_CACHE_HOME:-$HOME/.cache}/outrigger/controlplane-v1.37.2/kubectl}
[ -x "$KUBECTL" ] || { echo "devtime: no kubectl at $KUBECTL (make controlplane, or set KUBECTL)"; exit 1; }
# run LABEL [VAR=VALUE...]: make dev in the working directory, with the
# variables given, until its 3 nodes are initialized; its output in LOG.
run() {
	local label=$1 start end pid n running='' log
	shift
	log=$work/dev-$label.log
	# The kubeconfig polled is the one this run writes.
	rm -f .outrigger/kubeconfig
	: >"$log"
	start=$(date +%s.%N)
	env "$@" setsid make dev >"$log" 2>&1 &
	pid=$!
	while :; do
		if [ -z "$running" ] && grep -q "Outrigger is running" "$log"; then
			running=$(date +%s.%N)
		fi
		if [ -f .outrigger/kubeconfig ]; then
			n=$("$KUBECTL" --kubeconfig .outrigger/kubeconfig get nodes \
				-o jsonpath='{range .items[?(@.spec.providerID)]}{.metadata.name}{" "}{.spec.taints[*].key}{"\n"}{end}' 2>/dev/null |
				grep -vc uninitialized)
			[ "${n:-0}" -ge 3 ] && break
		fi
		if ! kill -0 "$pid" 2>/dev/null; then
			echo "$label: make dev exited (log: $log)"
			tail -20 "$log"
			return 1
		fi
		sleep 0.25
	done
	end=$(date +%s.%N)
	printf '%s: %.1f s to "Outrigger is running", %.1f s to 3 initialized nodes (log: %s)\n' "$label" \
		"$(echo "${running:-$end} - $start" | bc)" "$(echo "$end - $start" | bc)" "$log"
	kill -INT -- -"$pid" 2>/dev/null
	sleep 3
	kill -9 -- -"$pid" 2>/dev/null
	wait "$pid" 2>/dev/null
}
if [ -n "$warm_only" ]; then
	# In this checkout: Go's build cache keys the repository's packages by
	# their directory, and a clone elsewhere would compile them again.
	cd "$repo" || exit 1
	work=$(mktemp -d /tmp/outrigger-devtime-warm.XXXXXX)
	run warm
	exit
fi
rm -rf "$work"
mkdir -p "$work/home" "$work/gomod" "$work/gocache" "$work/xdg"
git clone -q "$repo" "$work/main"
cd "$work/main" || exit 1
fresh_env="HOME=$work/home GOMODCACHE=$work/gomod GOCACHE=$work/gocache XDG_CACHE_HOME=$work/xdg"
# shellcheck disable=SC2086 # fresh_env is four words
run fresh $fresh_env || exit 1
# The warm run starts once the fresh one's background kubectl build is done.
while pgrep -f "$work/.*kubectl" >/dev/null; do sleep 5; done
# shellcheck disable=SC2086
run warm $fresh_env
