#!/usr/bin/env bash
# Times `make dev` until its 3 nodes are initialized (a providerID, no
# uninitialized taint): first on a fresh machine's caches (a clean clone of
# this repository's HEAD, with HOME, GOMODCACHE, GOCACHE and XDG_CACHE_HOME
# pointed at empty folders), then again on the caches that run left.
#
#   tools/devtime.sh [WORKDIR]     (default /tmp/outrigger-devtime; removed first)
#
# It polls with KUBECTL (default: the kubectl of the caller's own control
# plane cache, which `make controlplane` builds), so that the fresh run's
# own kubectl, built in the background, is not waited for.
set -u
repo=$(git -C "$(dirname "$0")" rev-parse --show-toplevel)
work=${1:-/tmp/outrigger-devtime}
KUBECTL=${KUBECTL:-${XDG_CACHE_HOME:-$HOME/.cache}/outrigger/controlplane-v1.37.2/kubectl}
[ -x "$KUBECTL" ] || { echo "devtime: no kubectl at $KUBECTL (make controlplane, or set KUBECTL)"; exit 1; }
rm -rf "$work"
mkdir -p "$work/home" "$work/gomod" "$work/gocache" "$work/xdg"
git clone -q "$repo" "$work/main"
cd "$work/main" || exit 1
run() {
	local label=$1 start end pid n
	rm -rf .outrigger
	start=$(date +%s.%N)
	HOME=$work/home GOMODCACHE=$work/gomod GOCACHE=$work/gocache XDG_CACHE_HOME=$work/xdg \
		setsid make dev >"$work/dev-$label.log" 2>&1 &
	pid=$!
	while :; do
		if [ -f .outrigger/kubeconfig ]; then
			n=$("$KUBECTL" --kubeconfig .outrigger/kubeconfig get nodes \
				-o jsonpath='{range .items[?(@.spec.providerID)]}{.metadata.name}{" "}{.spec.taints[*].key}{"\n"}{end}' 2>/dev/null |
				grep -vc uninitialized)
			[ "${n:-0}" -ge 3 ] && break
		fi
		if ! kill -0 "$pid" 2>/dev/null; then
			echo "$label: make dev exited (log: $work/dev-$label.log)"
			tail -20 "$work/dev-$label.log"
			return 1
		fi
		sleep 0.25
	done
	end=$(date +%s.%N)
	printf '%s: %.1f s to 3 initialized nodes\n' "$label" "$(echo "$end - $start" | bc)"
	kill -INT -- -"$pid" 2>/dev/null
	sleep 3
	kill -9 -- -"$pid" 2>/dev/null
	wait "$pid" 2>/dev/null
}
run fresh || exit 1
# The warm run starts once the fresh one's background kubectl build is done.
while pgrep -f "$work/.*kubectl" >/dev/null; do sleep 5; done
run warm
