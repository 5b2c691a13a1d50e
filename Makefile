# The two commands a newcomer needs are `make dev` and `make test`; the rest
# are what they are built from.

K8S_VERSION := v1.37.2
K8S_MINOR := $(word 2,$(subst ., ,$(K8S_VERSION)))
# The Go module that builds K8S_VERSION's binaries: controlplane/ for this version, and
# controlplane/versions/v1.MINOR for the older minors of the support window (e2e-matrix).
K8S_MODULE := controlplane
# Same place as internal/dev/apiserver.AssetsDir: built once per machine.
ASSETS_ROOT := $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/outrigger
ASSETS ?= $(or $(OUTRIGGER_ASSETS),$(ASSETS_ROOT)/controlplane-$(K8S_VERSION))
# -s -w: no symbol table or DWARF in the Kubernetes binaries, which are only run (less to link, as
# for the test binaries below; stack traces keep their function names and lines).
K8S_LDFLAGS := -s -w -X k8s.io/component-base/version.gitVersion=$(K8S_VERSION) \
	-X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$(K8S_MINOR)
NODES ?= 3
CLUSTERS ?= 1
export OUTRIGGER_ASSETS := $(ASSETS)
# No DWARF from the compiler, for every go command make runs (and the ones the tests run, which inherit
# GOFLAGS): every binary here is either linked without it (-w) or only run, and without it a package
# compiles in about a fifth less CPU (client-go and k8s.io/api on an empty build cache: 121 CPU s against
# 156). Stack traces and log callers come from the symbol table, not from DWARF; a debugger wants
# `make ... NODWARF=`.
NODWARF ?= -gcflags=all=-dwarf=false
GOFLAGS := $(strip $(filter-out $(NODWARF),$(GOFLAGS)) $(NODWARF))
export GOFLAGS

# PROGRESS runs a long build step with its output in a log, saying what it does and how far it is
# (tools/progress.sh); lines start with PROGRESS_PREFIX, the goal make was asked for.
PROGRESS_PREFIX = make $(or $(MAKECMDGOALS),dev)
PROGRESS = tools/progress.sh -p '$(PROGRESS_PREFIX)'

.PHONY: dev test build controlplane verify verify-files verify-proto proto bench clean lint fuzz

## dev: run Outrigger on its embedded default (control plane + sim cloud + NODES nodes; CLUSTERS=3: three clusters
## served by one Outrigger in tenant mode). It waits
## only for what it runs (etcd, kube-apiserver, outrigger); kubectl, for you, is built meanwhile at
## the lowest CPU priority when missing (.outrigger/kubectl.log).
# Its builds run one after the other: go builds side by side (make -j) each compile the packages they
# share, and a fresh make dev took 502 s so, against 391 s one after the other.
# Each build says what it is doing and how far it is (tools/progress.sh), its output in a log under
# .outrigger/ that a failure ends with.
dev: $(ASSETS)/kube-apiserver $(ASSETS)/etcd build
	@[ -x $(ASSETS)/kubectl ] || { mkdir -p .outrigger; echo "make dev: building kubectl in the background (.outrigger/kubectl.log)"; \
		setsid nice -n 19 $(MAKE) --no-print-directory PROGRESS_PREFIX="make dev" $(ASSETS)/kubectl >.outrigger/kubectl.log 2>&1 & }
	@echo "make dev: starting ./bin/outrigger dev --nodes $(NODES)$(if $(filter-out 1,$(CLUSTERS)), --clusters $(CLUSTERS))"
	@./bin/outrigger dev --nodes $(NODES)$(if $(filter-out 1,$(CLUSTERS)), --clusters $(CLUSTERS))

## test: every test: unit, integration (real kube-apiserver + etcd, the files tagged
## `integration`; a plain `go test ./...` runs only the unit tests), upstream flag
## compatibility, the provider examples (an unchanged cloud-provider-aws among them),
## the Helm chart (rendered, and applied to a real API server), and as root the real cluster
## and upstream's fast load balancer e2e subset (e2e-fast).
# The test binaries are linked without DWARF (-w): a race test binary links in 6.7 s, not 8.5, and a failure's stack
# trace is the same. Fuzzing beyond the seed corpora (which every go test runs) is `make fuzz`:
# nine minutes on a fresh machine, most of it building instrumented packages.
# As root, what the real-cluster tests run (the Kubernetes binaries, the images, e2e.test) is built
# meanwhile, in the background at the lowest CPU priority: the Go tests spend much of their time
# waiting on API servers, clouds and processes, and the builds take only the CPU they leave
# (PREBUILD=0: one after the other). Its log is .outrigger/prebuild.log.
PREBUILD ?= 1
# What make cluster-test needs, which the background builds first: the cluster test starts on them while
# the rest (SUITE_ASSETS, for e2e-fast and gateway-conformance) is still being built.
CLUSTER_ASSETS := cluster-binaries cluster-images image
SUITE_ASSETS := e2e-binaries e2e-images gateway-images
# Then, as root, the other modules' tests (later-modules-test) run in the background, at the same lowest
# priority, while the real-cluster tests wait on the cluster; their output goes to the same log. The
# real-cluster steps then take the image the background built (-o image): the release's test rebuilds it
# meanwhile (the same bytes, renamed into place), and two image builds at once would share temporary files.
# At its end, also when a step failed, it prints each step's wall time (tools/steptimes.sh), the
# steps of docs/testing.md's "How long"; TEST_STEPS keeps them, one name<TAB>seconds<TAB>result a line.
TEST_STEPS := .outrigger/test-steps.tsv
test:
	@set -e; . tools/steptimes.sh; steps_begin $(TEST_STEPS); \
	step 'the control plane (`make controlplane`)' $(MAKE) --no-print-directory controlplane; \
	step '`make verify`' $(MAKE) --no-print-directory verify; \
	mkdir -p .outrigger; : >.outrigger/prebuild.log; rm -f .outrigger/cluster-built .outrigger/cluster-failed; \
	background() { v=$$1; echo "make test: $$2 in the background (.outrigger/prebuild.log)"; shift 2; \
		setsid nice -n 19 "$$@" >>.outrigger/prebuild.log 2>&1 & eval "$$v=$$!"; \
		steps_on_exit "kill -- -$$! 2>/dev/null || kill $$! 2>/dev/null || true"; }; \
	failed() { tail -50 .outrigger/prebuild.log; echo "make test: $$1: failed (.outrigger/prebuild.log)"; exit 1; }; \
	later="$(MAKE) --no-print-directory later-modules-test"; \
	par=; [ "$$(id -u)" != 0 ] || [ "$(PREBUILD)" != 1 ] || par=1; \
	if [ -n "$$par" ]; then background builds "building $(CLUSTER_ASSETS), then $(SUITE_ASSETS)" \
		sh -c '{ $(MAKE) --no-print-directory $(CLUSTER_ASSETS) && : >.outrigger/cluster-built; } || { : >.outrigger/cluster-failed; exit 1; }; \
			$(MAKE) --no-print-directory $(SUITE_ASSETS)'; fi; \
	step '`go test -race -tags integration ./...`' $(RACE_TEST); \
	if [ -n "$$par" ]; then \
		step "waiting for the real cluster's builds" sh -c 'until [ -e .outrigger/cluster-built ]; do [ ! -e .outrigger/cluster-failed ] || exit 1; sleep 1; done' || \
			failed "building $(CLUSTER_ASSETS)"; \
		background tests "the other modules' tests (later-modules-test)" $$later; \
	fi; \
	if [ "$$(id -u)" = 0 ]; then \
		step '`make cluster-test`' $(MAKE) --no-print-directory $${par:+-o image} cluster-test; \
		if [ -n "$$par" ]; then step "waiting for the e2e suites' builds" wait $$builds || failed "building $(SUITE_ASSETS)"; fi; \
		step '`make e2e-fast`' $(MAKE) --no-print-directory $${par:+-o image} e2e-fast; \
		step '`make gateway-conformance`' $(MAKE) --no-print-directory $${par:+-o image} gateway-conformance; \
	else echo "make test: skipping the real-cluster tests (cluster-test, e2e-fast, gateway-conformance): they need root for network namespaces"; \
		step_skipped '`make cluster-test`' 'skipped (needs root)'; step_skipped '`make e2e-fast`' 'skipped (needs root)'; \
		step_skipped '`make gateway-conformance`' 'skipped (needs root)'; \
	fi; \
	if [ -n "$$par" ]; then step "waiting for the other modules' tests" wait $$tests || failed "the other modules' tests"; else $$later; fi

# The root module's tests, three packages at a time (-p; the default is one per core): most of their time
# is spent waiting on API servers, clouds and processes (two cores were busy 66 % of the time at -p 3).
# The longest packages come first, as go test starts packages in the order it is given them: the
# chaos run alone takes almost four minutes, and started last it ended the step at 8 min 34 s, first
# at 5 min 22 s (warm caches). The order only schedules; ./... still names every package once.
RACE_FIRST := ./test/chaos ./internal/controllers/service ./test/shared ./test/chaos/plugins ./pkg/plugin \
	./internal/controllers/node ./internal/manager
RACE_TEST := go test -p 3 -race -count=1 -timeout 20m -ldflags=-w -tags integration $(RACE_FIRST) ./...

# later-modules-test: the tests of the repository's other modules, each a step of make test's table (its TEST_STEPS).
.PHONY: later-modules-test
later-modules-test:
	@set -e; . tools/steptimes.sh; steps_file=$(TEST_STEPS); \
	step -C bench/upstream-ccm "the upstream CCM's flags" go test -count=1 ./...; \
	step -C examples/aws 'the AWS example' go test -count=1 ./...; \
	step -C test/providers "the real providers' code" go test -count=1 ./...; \
	step -C charts/test 'the chart' go test -count=1 ./...; \
	step -C controlplane 'the image tools' go test -count=1 ./images/...; \
	step -C test/gatewayconformance 'the Gateway conformance runner' go test -count=1 ./...; \
	step -C tools/release 'the release, built twice and verified' go test -count=1 ./...

## fuzz: every native Go fuzz target (a func FuzzX in a _test.go file under pkg/ or internal/)
## for FUZZTIME each, after its committed seed corpus (f.Add, testdata/fuzz) passed.
FUZZTIME ?= 10s
fuzz:
	@set -e; for f in $$(git grep -l '^func Fuzz' -- 'pkg/*_test.go' 'internal/*_test.go'); do \
		for t in $$(sed -n 's/^func \(Fuzz[A-Za-z0-9_]*\)(.*/\1/p' $$f); do \
			echo "fuzz: ./$$(dirname $$f) $$t for $(FUZZTIME)"; \
			go test -run '^$$' -fuzz "^$$t\$$" -fuzztime $(FUZZTIME) ./$$(dirname $$f); \
		done; \
	done

## build: the outrigger binary (its output in .outrigger/build.log).
build:
	@$(PROGRESS) -u 'packages compiled' .outrigger/build.log 'building Outrigger (bin/outrigger)' \
		go build -v -o bin/outrigger ./cmd/outrigger

## controlplane: build etcd, kube-apiserver and kubectl from source, once, into $(ASSETS).
controlplane: $(ASSETS)/kube-apiserver $(ASSETS)/etcd $(ASSETS)/kubectl

# kube-apiserver and etcd in one go command (etcd's main package builds as "server"): it schedules the two
# binaries' packages together, so both cores stay busy while one of them links. The -X flags name no
# package etcd links, which the linker ignores.
# The modules are downloaded by listing the packages first (go build would download the same before
# compiling anything), which gives the number of packages the progress line counts the compiled ones
# against (`go build -v` names each package it compiles; fewer when the build cache holds some).
# The time it says: on the 2-core machine this build took 7 min 1 s of a fresh make dev's 484 s
# (docs/testing.md's "How long").
CONTROLPLANE_PACKAGES := k8s.io/kubernetes/cmd/kube-apiserver go.etcd.io/etcd/server/v3
$(ASSETS)/kube-apiserver $(ASSETS)/etcd &:
	@mkdir -p $(ASSETS)
	@echo "$(PROGRESS_PREFIX): the control plane (etcd, kube-apiserver $(K8S_VERSION)) is built from source, once per machine, into $(ASSETS): about 7 min on 2 cores"
	@t=$(ASSETS)/.build.$$$$ && mkdir -p $$t && \
	$(PROGRESS) .outrigger/controlplane-modules.log 'downloading its Go modules' \
		sh -c 'go -C $(K8S_MODULE) list -deps $(CONTROLPLANE_PACKAGES) >'"$$t/packages" && \
	$(PROGRESS) -u 'packages compiled' -n $$(wc -l <$$t/packages) .outrigger/controlplane.log 'compiling etcd and kube-apiserver' \
		go -C $(K8S_MODULE) build -v -ldflags "$(K8S_LDFLAGS)" -o $$t/ $(CONTROLPLANE_PACKAGES) && \
	mv $$t/server $(ASSETS)/etcd && mv $$t/kube-apiserver $(ASSETS)/kube-apiserver && rm $$t/packages && rmdir $$t

$(ASSETS)/kubectl:
	@mkdir -p $(ASSETS)
	@$(PROGRESS) -u 'packages compiled' .outrigger/kubectl-build.log 'building kubectl $(K8S_VERSION)' \
		go -C $(K8S_MODULE) build -v -ldflags "$(K8S_LDFLAGS)" -o $@.$$$$.tmp k8s.io/kubernetes/cmd/kubectl && mv $@.$$$$.tmp $@


VERIFY_GOFLAGS ?= -race
## verify: formatting, vet, and the product module never requiring k8s.io/kubernetes.
verify:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); echo "gofmt needed"; exit 1; }
	@# The integration-tagged build is vetted by the linter's govet (.golangci.yml: build-tags), from the
	@# same compiled packages; go vet here checks the untagged build, which the linter does not see.
	@# Both compile in the race detector's mode (VERIFY_GOFLAGS), the one make test's tests of this module
	@# run in: the packages are compiled once for the three, not once for vet and again for the tests.
	GOFLAGS="$(strip $(GOFLAGS) $(VERIFY_GOFLAGS))" go vet ./...
	@! grep -q 'k8s.io/kubernetes ' go.mod || { echo "go.mod must not require k8s.io/kubernetes"; exit 1; }
	@! go list -tags product -deps ./cmd/outrigger ./cmd/outrigger-local-lb | grep -E 'envtest|/internal/dev|/internal/providers/sim/simcli|/internal/providers/sim/simcloud|/internal/(testenv|testcert|metricstest|freeport|providertest|providermain)' || { echo "the product build (-tags product, the image) links test-only packages (above)"; exit 1; }
	@# The secure port authorizes with internal/accessreview, not the apiserver's webhook authorizer, whose CEL
	@# policy language is 9 MB of the binary and unused here.
	@! go list -tags product -deps ./cmd/outrigger | grep -E '^github.com/google/cel-go' || { echo "the product build links CEL (above): see internal/accessreview"; exit 1; }
	cd bench/upstream-ccm && go vet ./...
	cd charts/test && go vet ./...
	@for m in $$(git ls-files '*go.mod' | xargs -n1 dirname); do (cd $$m && go mod tidy -diff >/dev/null) || { echo "$$m: go.mod/go.sum not tidy: run 'go mod tidy' there"; exit 1; }; done
	$(MAKE) verify-files
	go test -count=1 ./test/addresses/
	$(MAKE) verify-proto
	$(MAKE) lint LINT_GOFLAGS="$(VERIFY_GOFLAGS)"

## verify-files: no build output is committed: fails on a tracked executable binary (ELF) or a
## tracked file over 1 MB, but the committed ones listed in VERIFY_LARGE_OK.
VERIFY_LARGE_OK ?=
verify-files:
	@bad=$$(git ls-files -z | xargs -0 -r sh -c 'for f; do [ -f "$$f" ] || continue; case " $(VERIFY_LARGE_OK) " in *" $$f "*) continue;; esac; if head -c 4 "$$f" | grep -q ELF || [ $$(stat -c %s "$$f") -gt 1048576 ]; then echo "$$f"; fi; done' sh); \
	test -z "$$bad" || { echo "tracked build outputs or files over 1 MB (build outputs are never committed; list a needed large file in VERIFY_LARGE_OK):"; echo "$$bad"; exit 1; }

## lint: golangci-lint (built from tools/lint, pinned there) with .golangci.yml, the root module.
# LINT_GOFLAGS: go build flags of the packages it loads (make verify: the race detector's mode).
# --allow-parallel-runners: another checkout's lint on the same machine (a second worktree, a CI run
# beside a developer's) must not fail this one; each run keeps its own cache entries.
LINT_GOFLAGS ?=
lint: bin/golangci-lint
	GOFLAGS="$(strip $(GOFLAGS) $(LINT_GOFLAGS))" bin/golangci-lint run --allow-parallel-runners ./...
bin/golangci-lint: tools/lint/go.mod
	cd tools/lint && go build -o ../../bin/golangci-lint github.com/golangci/golangci-lint/v2/cmd/golangci-lint

## proto: regenerate pkg/plugin/pluginpb from pkg/plugin/proto (tools pinned in tools/proto: buf's
## official npm distribution, the Go generators built from its go.mod).
PROTO_TOOLS := bin/buf bin/protoc-gen-go bin/protoc-gen-go-grpc
bin/buf: tools/proto/package-lock.json
	cd tools/proto && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error
	@mkdir -p bin && ln -sf ../tools/proto/node_modules/.bin/buf $@
bin/protoc-gen-go bin/protoc-gen-go-grpc &: tools/proto/go.mod
	cd tools/proto && go build -o ../../bin/protoc-gen-go google.golang.org/protobuf/cmd/protoc-gen-go
	cd tools/proto && go build -o ../../bin/protoc-gen-go-grpc google.golang.org/grpc/cmd/protoc-gen-go-grpc
proto: $(PROTO_TOOLS)
	cd pkg/plugin && ../../bin/buf generate

## verify-proto: fails when the committed generated code is not what the .proto gives.
verify-proto: proto
	@test -z "$$(git status --porcelain -- pkg/plugin/pluginpb)" || { git status --short -- pkg/plugin/pluginpb; git diff --stat -- pkg/plugin/pluginpb; echo "pkg/plugin/pluginpb is stale: run 'make proto' and commit"; exit 1; }

## bench: the benchmarks of docs/performance.md, Outrigger and the upstream CCM side by side
## (about two hours and three quarters, most of it bench/scale; bench/dataplane about 20 min, bench/tenants 13).
bench: controlplane build bin/outrigger-ccm bin/upstream-ccm
	go run ./bench/nodeinit -nodes 1000,5000
	go run ./bench/nodeinit -nodes 1000 -networking
	go run ./bench/nodeinit -nodes 1000 -plugin
	go run ./bench/scale $(SCALE_SETUP) -nodes 1000,5000,20000,50000 -services 1000 -limits 0 -ccms outrigger,upstream-tuned
	go run ./bench/scale $(SCALE_SETUP) -nodes 1000,5000 -services 1000 -limits 100 -ccms outrigger,upstream-tuned -out docs/performance/scale-limit
	go run ./bench/scale $(SCALE_SETUP) -nodes 1000,5000 -services 1000 -limits 0 -ccms outrigger,upstream-tuned -out docs/performance/scale-small
	go run ./bench/scale -refresh 1m -idle-periods 1 -bound 20m -service-runs 1 -nodes 50000 -services 10000 -limits 0 -ccms outrigger-plugin,outrigger -out docs/performance/scale-plugin
	go run ./bench/scale -refresh 1m -idle-periods 1 -bound 20m -append -nodes 1000 -services 1000 -limits 0 -ccms outrigger-plugin,outrigger -out docs/performance/scale-plugin
	go run ./bench/hung -hung 0,12,100,1000 -bound 1m
	go run ./bench/hung -kind nodes -hung 0,12,100,1000 -bound 1m
	go run ./bench/hung -kind routes -hung 0,12,100,1000 -bound 1m
	go run ./bench/tenants -tenants 1,10,25
	go run ./bench/gateway -gateways 100 -routes 1000
	@[ -x /usr/sbin/nginx ] && [ -f /usr/lib/nginx/modules/ngx_stream_module.so ] && [ -x /usr/sbin/haproxy ] && [ -x /usr/bin/caddy ] && \
		[ -x /usr/bin/wrk ] && [ -x /usr/bin/h2load ] || \
		{ apt-get update && apt-get install -y nginx libnginx-mod-stream haproxy caddy wrk nghttp2-client; }
	go run ./bench/dataplane -out docs/performance/dataplane.md

# What every bench/scale row shares (-append refuses another setup).
SCALE_SETUP := -refresh 1m -idle-periods 1 -bound 5m

## chaos: a seeded, bounded chaos run (docs/reliability.md#chaos): Outrigger replicas and the
## API server SIGKILLed, etcd paused, the sim cloud failing, invariants checked (10 minutes by
## default). CHAOS_FLAGS="-seed N -duration 30m" to change it. A 2-minute run is in make test.
## CHAOS_FLAGS="-failover 20": 20 leader SIGKILLs among 3 replicas under churn, time to a new
## leader measured (docs/reliability.md#failover-under-sigkill).
## CHAOS_FLAGS="-shared -hang -lost-responses": a second CCM on the same cloud, hung calls on
## some load balancers, lost API answers (docs/reliability.md#settings); any of them.
.PHONY: chaos
CHAOS_FLAGS ?=
chaos: controlplane build
	go run ./test/chaos/cmd/chaos -outrigger bin/outrigger $(CHAOS_FLAGS)

## bin/outrigger-ccm: Outrigger's command with the benchmarks' providers, run as its own process by bench/nodeinit.
bin/outrigger-ccm: $(shell git ls-files pkg internal bench/outrigger-ccm bench/internal) go.mod go.sum
	go build -o bin/outrigger-ccm ./bench/outrigger-ccm

## bin/upstream-ccm: the upstream cloud-controller-manager with the sim provider (its own module).
bin/upstream-ccm: $(shell git ls-files bench/upstream-ccm bench/internal) go.mod
	cd bench/upstream-ccm && go build -o ../../bin/upstream-ccm .

.PHONY: cluster cluster-binaries cluster-down cluster-test cluster-images image

## cluster-binaries: build kubelet, kube-proxy, kube-controller-manager, kube-scheduler and
## agnhost from source, once, into $(ASSETS), next to kube-apiserver (see docs/cluster.md).
CLUSTER_BINARIES := kubelet kube-proxy kube-controller-manager kube-scheduler agnhost
# Extra go build flags for the Kubernetes binaries (say -p 1 to build one package at a time).
CLUSTER_GOFLAGS ?=
cluster-binaries: controlplane $(addprefix $(ASSETS)/,$(CLUSTER_BINARIES))

$(ASSETS)/kubelet $(ASSETS)/kube-proxy $(ASSETS)/kube-controller-manager $(ASSETS)/kube-scheduler:
	@mkdir -p $(ASSETS)
	cd $(K8S_MODULE) && go build $(CLUSTER_GOFLAGS) -ldflags "$(K8S_LDFLAGS)" -o $@.tmp k8s.io/kubernetes/cmd/$(notdir $@) && mv $@.tmp $@

# With cgo, as the other binaries here: a CGO_ENABLED=0 build would compile its 1,151 packages
# again (cgo changes the net package, and so everything built on it); ocitar packs the libraries.
$(ASSETS)/agnhost:
	@mkdir -p $(ASSETS)
	cd $(K8S_MODULE) && go build $(CLUSTER_GOFLAGS) -ldflags "$(K8S_LDFLAGS)" -o $@.tmp k8s.io/kubernetes/test/images/agnhost && mv $@.tmp $@

## cluster-images: the images the cluster runs, built from source into OCI tarballs (no pulls):
## a Go pause, agnhost and CoreDNS, packed by controlplane/images/ocitar (go-containerregistry).
CLUSTER_IMAGES := $(ASSETS)/images/pause.tar $(ASSETS)/images/agnhost.tar $(ASSETS)/images/coredns.tar
cluster-images: $(CLUSTER_IMAGES)

$(ASSETS)/pause: controlplane/images/pause/main.go
	cd controlplane && CGO_ENABLED=0 go build -o $@.tmp ./images/pause && mv $@.tmp $@

$(ASSETS)/images/pause.tar: $(ASSETS)/pause controlplane/images/ocitar/main.go
	@mkdir -p $(dir $@)
	cd controlplane && go run ./images/ocitar -binary $< -name outrigger.local/pause:1 -o $@

# CoreDNS, the cluster's DNS, from its own module (controlplane/coredns: only the plugins used).
$(ASSETS)/coredns: controlplane/coredns/main.go controlplane/coredns/go.mod
	cd controlplane/coredns && CGO_ENABLED=0 go build $(CLUSTER_GOFLAGS) -ldflags "-s -w" -o $@.tmp . && mv $@.tmp $@

$(ASSETS)/images/coredns.tar: $(ASSETS)/coredns controlplane/images/ocitar/main.go
	@mkdir -p $(dir $@)
	cd controlplane && go run ./images/ocitar -binary $< -name outrigger.local/coredns:v1.14.7 -o $@

$(ASSETS)/images/agnhost.tar: $(ASSETS)/agnhost controlplane/images/ocitar/main.go
	@mkdir -p $(dir $@)
	cd controlplane && go run ./images/ocitar -binary $< -name outrigger.local/agnhost:$(K8S_VERSION) -o $@

## gateway-images: the images the Gateway API conformance suite's manifests name, built from its
## own source (sigs.k8s.io/gateway-api/conformance's echo-basic) and CoreDNS's, into
## $(ASSETS)/gateway-images (no pulls).
GATEWAY_IMAGES_DIR := $(ASSETS)/gateway-images
ECHO_BASIC_TAGS := v1.5.1 v1.6.0-dev.2 v1.6.0-dev.3
.PHONY: gateway-images gateway-conformance
gateway-images: $(foreach t,$(ECHO_BASIC_TAGS),$(GATEWAY_IMAGES_DIR)/echo-basic-$(t).tar) $(GATEWAY_IMAGES_DIR)/coredns-v1.12.2.tar

$(ASSETS)/echo-basic: test/gatewayconformance/go.mod
	@mkdir -p $(ASSETS)
	cd test/gatewayconformance && CGO_ENABLED=0 go build -o $@.$$$$.tmp sigs.k8s.io/gateway-api/conformance/echo-basic && mv $@.$$$$.tmp $@

$(GATEWAY_IMAGES_DIR)/echo-basic-%.tar: $(ASSETS)/echo-basic controlplane/images/ocitar/main.go
	@mkdir -p $(dir $@)
	cd controlplane && go run ./images/ocitar -binary $< -name registry.k8s.io/gateway-api/echo-basic:$* -o $@

$(GATEWAY_IMAGES_DIR)/coredns-v1.12.2.tar: $(ASSETS)/coredns controlplane/images/ocitar/main.go
	@mkdir -p $(dir $@)
	cd controlplane && go run ./images/ocitar -binary $< -name registry.k8s.io/coredns/coredns:v1.12.2 -o $@

## gateway-conformance: the Gateway API conformance suite (v1.6, profiles GATEWAY-HTTP, GATEWAY-GRPC,
## GATEWAY-TCP, GATEWAY-UDP, GATEWAY-TLS) against Outrigger on the real cluster (root; docs/gateway.md). Reports into
## .outrigger/gateway-conformance; GATEWAY_CONFORMANCE_FLAGS, e.g. -run-test HTTPRouteSimpleSameNamespace.
GATEWAY_CONFORMANCE_FLAGS ?=
.PHONY: gateway-conformance-publish
gateway-conformance: cluster-binaries cluster-images gateway-images image
	cd test/gatewayconformance && go run ./cmd/gateway-conformance $(GATEWAY_CONFORMANCE_FLAGS)

## gateway-conformance-publish: gateway-conformance, its report then committed as
## docs/gateway/conformance-report.yaml and summarized in docs/gateway.md.
gateway-conformance-publish: cluster-binaries cluster-images gateway-images image
	cd test/gatewayconformance && go run ./cmd/gateway-conformance -publish $(CURDIR) $(GATEWAY_CONFORMANCE_FLAGS)

## image: Outrigger's container image, an OCI tarball (bin/outrigger-image.tar, no Docker): the
## static outrigger binary at /usr/local/bin/outrigger (and cloud-controller-manager, the name
## upstream manifests run), outrigger-local-lb beside it, user 65532.
# Tagged with Outrigger's version (internal/version), which the chart's appVersion is.
VERSION := $(shell sed -n 's/^const Version = "\(.*\)"$$/\1/p' internal/version/version.go)
IMAGE ?= outrigger.local/outrigger:$(VERSION)
image:
	@mkdir -p bin/image
	CGO_ENABLED=0 go build -trimpath -tags product -o bin/image/outrigger ./cmd/outrigger
	CGO_ENABLED=0 go build -trimpath -o bin/image/outrigger-local-lb ./cmd/outrigger-local-lb
	cd controlplane && go run ./images/ocitar -name $(IMAGE) -o ../bin/outrigger-image.tar -user 65532:65532 \
		-file ../bin/image/outrigger=/usr/local/bin/outrigger \
		-file ../bin/image/outrigger-local-lb=/usr/local/bin/outrigger-local-lb \
		-link /usr/local/bin/cloud-controller-manager=outrigger \
		-- /usr/local/bin/outrigger

## release: the release's files in RELEASE_DIR (docs/install.md#verifying-a-release): the image tarball of
## `make image` as outrigger-image-v$(VERSION).tar, the chart packaged as `helm package` does
## (Helm's Go packages, charts/test/cmd/package-chart) as outrigger-$(VERSION).tgz with the image's digest as
## its image.digest, deploy/deployment.yaml with the image by digest, a CycloneDX SBOM of the image, a SLSA
## provenance statement (every file, the image digest, the source commit) and the image's signature (DSSE
## envelopes), SHA256SUMS and its signature, all signed with RELEASE_KEY (Ed25519), every timestamp the
## commit's: the same commit gives the same bytes (tools/release). RELEASE_KEY must be the private half of
## the pinned key RELEASE_PUB (tools/release/release-key.pub; a fork or a test pins its own with
## RELEASE_PUB=path): any other key is refused before anything is built, and none is ever made here
## (`make release-key`). Then it tags the commit v$(VERSION) (RELEASE_TAG=0: not), the version a provider's
## go.mod requires: only a clean tree whose CHANGELOG.md has the version's section, never a tag that names
## another commit.
.PHONY: release release-verify release-key release-fingerprint
RELEASE_TAG ?= 1
RELEASE_DIR ?= bin/release
RELEASE_KEY ?= $(or $(XDG_CONFIG_HOME),$(HOME)/.config)/outrigger/release-key.pem
RELEASE_PUB ?= tools/release/release-key.pub
SOURCE_DATE_EPOCH ?= $(shell git log -1 --format=%ct)
RELEASE_TOOL = cd tools/release && go run .
release:
	@$(RELEASE_TOOL) check-key -key $(abspath $(RELEASE_KEY)) -pub $(abspath $(RELEASE_PUB))
	@$(MAKE) --no-print-directory image
	rm -rf $(RELEASE_DIR) && mkdir -p $(RELEASE_DIR)
	cp bin/outrigger-image.tar $(RELEASE_DIR)/outrigger-image-v$(VERSION).tar
	digest=$$($(RELEASE_TOOL) digest -image $(abspath $(RELEASE_DIR))/outrigger-image-v$(VERSION).tar) && \
		cd charts/test && go run ./cmd/package-chart -o $(abspath $(RELEASE_DIR)) -version $(VERSION) -mtime $(SOURCE_DATE_EPOCH) -image-digest $$digest
	$(RELEASE_TOOL) attest -dir $(abspath $(RELEASE_DIR)) -key $(abspath $(RELEASE_KEY)) -pub $(abspath $(RELEASE_PUB)) \
		-deploy $(CURDIR)/deploy/deployment.yaml -version $(VERSION) -commit $$(git rev-parse HEAD) -image $(IMAGE) \
		-source-date-epoch $(SOURCE_DATE_EPOCH)
	@[ "$(RELEASE_TAG)" = 0 ] || { $(RELEASE_TOOL) tag -repo $(CURDIR) -version $(VERSION); }

## release-verify: verify RELEASE_DIR against the pinned public key RELEASE_PUB (tools/release/release-key.pub,
## fingerprint in SECURITY.md); prints the verified version, source commit and image digest.
release-verify:
	$(RELEASE_TOOL) verify -dir $(abspath $(RELEASE_DIR)) -key $(abspath $(RELEASE_PUB))

## release-fingerprint: the fingerprint (SHA-256 of the PKIX form) of RELEASE_PUB, as README.md publishes it.
release-fingerprint:
	@$(RELEASE_TOOL) fingerprint -key $(abspath $(RELEASE_PUB))

## release-key: first-time setup of a signing key, for a fork making its own (the project's is the release
## manager's): a new Ed25519 pair, the private key at RELEASE_KEY (never over an existing file; keep it out of
## the repository), the public key at RELEASE_PUB (by default replacing the pinned one: commit it and publish
## the fingerprint it prints).
release-key:
	@mkdir -p $(dir $(abspath $(RELEASE_KEY)))
	@$(RELEASE_TOOL) keygen -key $(abspath $(RELEASE_KEY)) -pub $(abspath $(RELEASE_PUB)) && \
		echo "release-key: private key $(abspath $(RELEASE_KEY)), public key $(abspath $(RELEASE_PUB)), fingerprint $$(go run . fingerprint -key $(abspath $(RELEASE_PUB)))"

## cluster: a real two-node cluster in network namespaces, initialized by Outrigger (root; docs/cluster.md).
## Ctrl-C tears it down; `make cluster-down` removes what a killed run left behind.
## CLUSTER_FLAGS=-hybrid: its nodes on two platforms (local and sim), one Outrigger serving both.
CLUSTER_FLAGS ?=
cluster: cluster-binaries cluster-images image
	go run ./cluster/cmd/cluster up -images $(ASSETS)/images -outrigger-image bin/outrigger-image.tar $(CLUSTER_FLAGS)

cluster-down:
	go run ./cluster/cmd/cluster down

## cluster-test: the real-cluster tests (root; skipped by a plain `go test ./...` without OUTRIGGER_CLUSTER=1):
## the harness's own (Outrigger from deploy/'s manifests), then the chart installed by Helm with the
## image pulled from a registry the cluster serves (charts/test/cluster).
cluster-test: cluster-binaries cluster-images image
	OUTRIGGER_CLUSTER=1 OUTRIGGER_IMAGE=$(CURDIR)/bin/outrigger-image.tar go test -count=1 -v -timeout 15m ./cluster/...
	cd charts/test && OUTRIGGER_CLUSTER=1 OUTRIGGER_IMAGE=$(CURDIR)/bin/outrigger-image.tar go test -count=1 -v -timeout 15m ./cluster/

.PHONY: e2e-upstream e2e-fast e2e-binaries e2e-images

## e2e-upstream: upstream's own e2e tests (e2e.test of k8s.io/kubernetes $(K8S_VERSION)), its
## [Feature:LoadBalancer] tests, against the real cluster (root; docs/e2e.md).
## E2E_FLAGS go to cluster/cmd/e2e-upstream, e.g. E2E_FLAGS='-focus "session affinity"'.
E2E_FLAGS ?=
e2e-upstream: cluster-binaries cluster-images e2e-binaries e2e-images image
	go run ./cluster/cmd/e2e-upstream -command "make e2e-upstream" -images $(ASSETS)/images -e2e-images $(ASSETS)/e2e-images \
		-outrigger-image bin/outrigger-image.tar $(E2E_FLAGS)

## e2e-fast: e2e-upstream but its two 10-minute rolling-update tests (cluster/e2e.FastExclusions),
## about five minutes; in make test as root. Reports into .outrigger/e2e-fast (summary.xml: the JUnit summary).
e2e-fast: cluster-binaries cluster-images e2e-binaries e2e-images image
	go run ./cluster/cmd/e2e-upstream -fast -report-dir .outrigger/e2e-fast -command "make e2e-fast" \
		-images $(ASSETS)/images -e2e-images $(ASSETS)/e2e-images -outrigger-image bin/outrigger-image.tar $(E2E_FLAGS)

## e2e-matrix: e2e-fast on each Kubernetes version of the support window (docs/compatibility.md),
## each with its own binaries, images and e2e.test, built from its module into its own assets
## directory, and one Outrigger image for all; each JUnit summary into docs/e2e/compatibility/.
E2E_MATRIX := v1.35.4 v1.36.3 v1.37.2
# Per older version: its module, and the e2e image tags its test/utils/image/manifest.go asks for
# (checked first, by each module's test).
E2E_MATRIX_v1.35.4 := K8S_MODULE=controlplane/versions/v1.35 E2E_AGNHOST_VERSION=2.59 E2E_PAUSE_VERSION=3.10.1
E2E_MATRIX_v1.36.3 := K8S_MODULE=controlplane/versions/v1.36 E2E_AGNHOST_VERSION=2.63.0 E2E_PAUSE_VERSION=3.10.2
E2E_MATRIX_DIR := .outrigger/e2e-matrix
.PHONY: e2e-matrix
e2e-matrix: image
	cd controlplane && go test -count=1 ./images/e2e/
	for m in controlplane/versions/*/; do (cd $$m && go test -count=1 .) || exit 1; done
	@mkdir -p $(E2E_MATRIX_DIR) docs/e2e/compatibility
	cp bin/outrigger-image.tar $(E2E_MATRIX_DIR)/outrigger-image.tar
	@# The summaries are copied into docs/ after the last run: a tracked file changed before a run would
	@# mark that run's commit -dirty.
	@st=0; $(foreach v,$(E2E_MATRIX),rm -rf $(E2E_MATRIX_DIR)/$(v); \
		$(MAKE) -o image e2e-fast K8S_VERSION=$(v) ASSETS=$(ASSETS_ROOT)/controlplane-$(v) $(E2E_MATRIX_$(v)) \
		E2E_FLAGS='-report-dir $(E2E_MATRIX_DIR)/$(v) -command "make e2e-matrix E2E_MATRIX=$(v)" -outrigger-image $(E2E_MATRIX_DIR)/outrigger-image.tar' || st=1;) \
	$(foreach v,$(E2E_MATRIX),cp $(E2E_MATRIX_DIR)/$(v)/summary.xml docs/e2e/compatibility/$(v).xml || st=1;) exit $$st

## e2e-binaries: $(ASSETS)/e2e.test, upstream's e2e suite, built from source, and $(ASSETS)/ginkgo, the
## ginkgo CLI of the same module, which runs it in parallel.
e2e-binaries: $(ASSETS)/e2e.test $(ASSETS)/ginkgo
$(ASSETS)/ginkgo:
	@mkdir -p $(ASSETS)
	cd $(K8S_MODULE) && go build -ldflags "-s -w" -o $@.tmp github.com/onsi/ginkgo/v2/ginkgo && mv $@.tmp $@
$(ASSETS)/e2e.test:
	@mkdir -p $(ASSETS)
	cd $(K8S_MODULE) && go test -c $(CLUSTER_GOFLAGS) -ldflags "$(K8S_LDFLAGS)" -o $@.tmp k8s.io/kubernetes/test/e2e && mv $@.tmp $@

## e2e-images: the images the suite asks for, under its own names (test/utils/image of
## $(K8S_VERSION)): agnhost with the shell tools its tests exec (dash as /bin/sh, busybox,
## OpenBSD nc, curl and GNU wget from this machine's Debian packages, with their libraries),
## and pause. Not busybox's sh: it runs its own applets before PATH (its nc lacks -v); not its
## wget: the static build crashes resolving an address.
# agnhost's own version in that source (test/images/agnhost/VERSION), the tag the suite asks for.
E2E_AGNHOST_VERSION := 2.66.1
# The pause tag of that manifest.
E2E_PAUSE_VERSION := 3.10.2
E2E_DEBS := busybox-static netcat-openbsd curl wget
e2e-images: $(ASSETS)/e2e-images/agnhost.tar $(ASSETS)/e2e-images/pause.tar
$(ASSETS)/e2e-images/agnhost.tar: $(ASSETS)/agnhost controlplane/images/ocitar/main.go controlplane/images/e2e/wgetrc
	@dpkg -s $(E2E_DEBS) >/dev/null 2>&1 || { echo "e2e-images: installing $(E2E_DEBS) (Debian): the suite runs /bin/sh, nc, wget and curl inside agnhost"; \
		apt-get -o DPkg::Lock::Timeout=600 update -qq && DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq $(E2E_DEBS); }
	@mkdir -p $(dir $@)
	cd controlplane && go run ./images/ocitar -name outrigger.local/e2e-test-images/agnhost:$(E2E_AGNHOST_VERSION) -o $@ \
		-host-binary $<=/agnhost -host-binary /bin/dash=/bin/sh -busybox /bin/busybox -host-binary /bin/nc.openbsd=/usr/bin/nc \
		-host-binary /usr/bin/curl=/usr/bin/curl -host-binary /usr/bin/wget=/usr/bin/wget \
		-file ../controlplane/images/e2e/wgetrc=/etc/wgetrc -cmd pause -- /agnhost
$(ASSETS)/e2e-images/pause.tar: $(ASSETS)/pause controlplane/images/ocitar/main.go
	@mkdir -p $(dir $@)
	cd controlplane && go run ./images/ocitar -binary $< -name outrigger.local/pause:$(E2E_PAUSE_VERSION) -o $@

clean:
	rm -rf bin .outrigger
