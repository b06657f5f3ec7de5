# cortex-sync: build, test, lint, benchmark and demo.
GO          ?= go
BIN         := bin/cortex-sync
STATICCHECK := honnef.co/go/tools/cmd/staticcheck@v0.8.2
DEMO        := /tmp/cortex-sync-demo
# Programs the tests start besides Go itself, and the Debian package of each.
# (The pid-1 script also uses unshare, from util-linux, and skips without it.)
TEST_TOOLS  := sh:dash stat:coreutils touch:coreutils find:findutils git:git python3:python3

.PHONY: sops-fixtures all build test race check-tools lint bench bench-data demo clean test-crash test-faults fuzz etcd fleet-etcd fleet-etcd-stop fleet-demo fleetsim

all: lint test

# make build stamps the commit, its time and whether the work tree has
# changes, as Go's own VCS stamping would, which records nothing with
# GOFLAGS=-buildvcs=false or in a linked worktree.
VCS_COMMIT   := $(shell git rev-parse HEAD 2>/dev/null)
VCS_TIME     := $(shell TZ=UTC git log -1 --format=%cd --date=format-local:%Y-%m-%dT%H:%M:%SZ 2>/dev/null)
VCS_MODIFIED := $(shell test -n "$$(git status --porcelain 2>/dev/null)" && echo true)
BUILD_LDFLAGS := $(if $(VCS_COMMIT),-X main.commit=$(VCS_COMMIT) -X main.date=$(VCS_TIME) -X main.modified=$(VCS_MODIFIED))

build:
	$(GO) build -ldflags "$(BUILD_LDFLAGS)" -o $(BIN) ./cmd/cortex-sync

check-tools:
	@missing=""; pkgs=""; for tp in $(TEST_TOOLS); do t=$${tp%%:*}; \
	  command -v $$t >/dev/null 2>&1 || [ -x /usr/sbin/$$t ] || { missing="$$missing $$t"; pkgs="$$pkgs $${tp#*:}"; }; done; \
	if [ -n "$$missing" ]; then echo "make test needs:$$missing (on Debian: apt-get install -y$$pkgs)"; exit 1; fi

test: check-tools
	$(GO) test ./...

# The same tests under the race detector: planning, writes, Git readers and
# the shim are concurrent.
race: check-tools
	$(GO) test -race ./...

# SIGKILL syncs at seeded moments (30 a scenario: a 10,000-file Directory
# and 2,000 Files, first sync and update, and a Process), and the agent
# while it applies the same updates; then 12 generations of the Directory,
# each applied by a killed sync (and by a killed agent): nothing torn or
# lost, nothing left over, the next sync (or restarted agent) converges;
# and every caller of a revision's life killed at each of its steps
# (TestCrashRevisionSteps, a build with -tags crash). About an hour; CRASH_FLAGS narrows it, e.g.
# CRASH_FLAGS='-crash.kills=3 -crash.files=200 -crash.dirfiles=1000'.
CRASH_FLAGS ?=
test-crash:
	@mkdir -p bin; rc=0; $(GO) test -tags crash -count=1 -timeout 3h -v ./internal/crashtest $(CRASH_FLAGS) > bin/test-crash.log 2>&1 || rc=$$?; \
	grep -E '^ *(--- |ok|FAIL|PASS)|(crash|agent_crash|life_crash|harness)_test.go' bin/test-crash.log; \
	[ $$rc -eq 0 ] || { tail -40 bin/test-crash.log; echo "full log: bin/test-crash.log"; }; exit $$rc

# Disk full, read-only, permission denied, layout and Git server faults:
# each fails plainly, keeps the host, and recovers once the fault clears.
# Some need root (mount, another user); they skip, saying why, without.
test-faults:
	@mkdir -p bin; rc=0; $(GO) test -tags faults -count=1 -v ./internal/crashtest > bin/test-faults.log 2>&1 || rc=$$?; \
	grep -E '^ *(--- |ok|FAIL|PASS)|faults: ' bin/test-faults.log; \
	[ $$rc -eq 0 ] || { tail -40 bin/test-faults.log; echo "full log: bin/test-faults.log"; }; exit $$rc

# Every fuzz target for FUZZTIME each; crashers land in testdata/fuzz/ and
# stay there as regression inputs. Go 1.26's fuzz coordinator may fail a
# run with a bare "context deadline exceeded" as FUZZTIME ends on a busy
# machine (golang/go#75804, fixed in Go 1.27): that, with no failing input
# written, is not a finding and does not fail the target; anything else does.
FUZZTIME ?= 20s
FUZZ_TARGETS = resource:FuzzLoad diff:FuzzRender diff:FuzzUnified index:FuzzDecodeIndex \
	index:FuzzIndexLog state:FuzzLoadSnapshot agent:FuzzWebhook sops:FuzzDecrypt \
	vars:FuzzRender trust:FuzzParseAllowedSigners
fuzz:
	@mkdir -p bin; for t in $(FUZZ_TARGETS); do \
		pkg=./pkg/$${t%%:*}; name=$${t#*:}; log=bin/fuzz-$$name.log; \
		echo "$(GO) test $$pkg -run '^\$$' -fuzz '^$$name\$$' -fuzztime $(FUZZTIME)"; \
		if $(GO) test $$pkg -run '^$$' -fuzz "^$$name\$$" -fuzztime $(FUZZTIME) > $$log 2>&1; then tail -1 $$log; continue; fi; \
		if grep -q 'context deadline exceeded' $$log && ! grep -qE 'Failing input written|panic:' $$log; then \
			echo "$$name: no failing input; only the fuzz coordinator's deadline race (golang/go#75804): not a finding"; continue; fi; \
		cat $$log; exit 1; \
	done

lint:
	$(GO) vet ./...
	GOOS=darwin GOARCH=arm64 $(GO) vet ./...
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) run $(STATICCHECK) ./...

# End-to-end speed (wall and CPU, alternated pairs) and memory against rsync
# and git on an 11,478-file tree (GOROOT/src), then the agent (cortex-sync
# run) healing an edit and applying a webhook's commit at 1,000 files and
# the whole tree. BENCH="-scale 4" for 45,912 files, BENCH=-busy to keep one
# core busy with a spinning process, BENCH=-agent-only for the agent's rows
# alone. About 10 minutes on the 2-core build machine; 35 with -scale 4.
BENCH ?=
# BENCH="-files 1000000 -data DIR -runs 1": a generated tree of a million
# files and a Git repository of it, made in DIR once and used again.
bench: build
	$(GO) run ./bench -bin $(BIN) $(BENCH)

# Only the data set: make bench-data BENCH_FILES=1000000 BENCH_DATA=DIR.
BENCH_FILES ?= 1000000
BENCH_DATA  ?= /var/tmp/cortex-sync-bench-$(BENCH_FILES)
bench-data:
	$(GO) run ./bench -gen-only -files $(BENCH_FILES) -data $(BENCH_DATA)

# Sync the bundled example into a sandbox root, then show status.
demo: build
	rm -rf $(DEMO)
	mkdir -p $(DEMO)/root
	$(BIN) sync --prune --dir examples/quickstart --root $(DEMO)/root --state-dir $(DEMO)/state
	$(BIN) status --root $(DEMO)/root --state-dir $(DEMO)/state
	@echo
	@echo "The host is under $(DEMO)/root. Edit a file there and try:"
	@echo "  $(BIN) diff --dir examples/quickstart --root $(DEMO)/root --state-dir $(DEMO)/state"

clean:
	rm -rf bin $(DEMO)

# etcd for trying a fleet by hand: go.etcd.io/etcd/server/v3's etcdmain at
# go.mod's version, as its own binary (cortex-sync never links it).
etcd:
	$(GO) build -o bin/etcd ./internal/cmd/etcd

# Three etcd members on 127.0.0.1 (clients on 23791-23793) under
# $(FLEET_DEMO)/etcd, in the background; fleet-etcd-stop ends them.
FLEET_DEMO := /tmp/cortex-sync-fleet
fleet-etcd: etcd
	sh examples/fleet/etcd-local.sh start $(FLEET_DEMO)/etcd

fleet-etcd-stop:
	sh examples/fleet/etcd-local.sh stop $(FLEET_DEMO)/etcd

# HOSTS simulated hosts (bench/fleetsim: members of pkg/fleet, no
# processes) on three fresh etcd members on 127.0.0.1 (clients on
# 24791-24793, data under $(FLEET_DEMO)/sim), through PROXIES etcd gRPC
# proxies (0: straight to the members), roll out a revision; everything
# stops after. FLEETSIM adds flags, e.g. FLEETSIM="-rollouts 3 -timeout 10m".
HOSTS    ?= 300
PROXIES  ?= 0
FLEETSIM ?=
fleetsim: etcd
	sh bench/fleetsim/local.sh $(FLEET_DEMO)/sim bin/etcd $(HOSTS) $(PROXIES) $(FLEETSIM)

# Three etcd members and five agents (h1…h5, role=web) on 127.0.0.1 under
# $(FLEET_DEMO)/demo: a rollout with a canary, a broken one that pauses,
# a singleton's failover, a hand edit healed with etcd down; then
# everything stops. Needs Go, git, python3 and make (and the ports of
# fleet-etcd, so not beside it).
fleet-demo: build etcd
	sh examples/fleet/demo.sh $(BIN) bin/etcd $(FLEET_DEMO)/demo

# Release and reference docs (new targets; see docs/install.md). An
# installed goreleaser or nfpm is used when on the PATH; else each is built
# from source on first use (goreleaser: about 300 modules, over 10 minutes
# on 2 cores; nfpm: about a minute).
GORELEASER_MOD := github.com/goreleaser/goreleaser/v2@v2.15.1
NFPM_MOD       := github.com/goreleaser/nfpm/v2/cmd/nfpm@v2.48.0
GORELEASER     ?= $(or $(shell command -v goreleaser 2>/dev/null),$(GO) run $(GORELEASER_MOD))
NFPM           ?= $(or $(shell command -v nfpm 2>/dev/null),$(GO) run $(NFPM_MOD))

.PHONY: release-check package-check docs

# Build a snapshot release of HEAD (goreleaser check, then release
# --snapshot --clean: binaries, archives, checksums, SBOMs, .deb and .rpm)
# into dist/, and check the .deb's layout. Not part of make test.
release-check:
	GORELEASER="$(GORELEASER)" sh packaging/release-check.sh

# The fast path: the work tree's binary packed into a .deb by nfpm alone
# (packaging/nfpm.yaml), and its layout checked. Not part of make test.
package-check:
	NFPM="$(NFPM)" GO="$(GO)" sh packaging/package-check.sh

# Regenerate docs/cli, docs/man, docs/config.md and docs/schema from the
# commands, flags and Go types; a test fails while they are stale.
# The SOPS fixtures of pkg/sops (and of testdata/script/sops.txtar), made
# with the sops library by internal/sopsgen, a module of its own so that the
# main build never compiles sops' cloud KMS SDKs. New keys each time.
sops-fixtures:
	cd internal/sopsgen && $(GO) run . ../../pkg/sops/testdata

docs:
	$(GO) test ./cmd/cortex-sync -run '^TestGeneratedDocs$$' -update
