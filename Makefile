# tidemark: the commands a newcomer and CI use. See README.md.
GO ?= go
PKGS := ./...
# The library is the module at the root; the benchmarks and the reliability
# scenarios are modules of their own (bench/, torture/), so that a program
# that depends on the library does not depend on what they use. go.work ties
# the three together for work in this repository.
MODULES := . bench torture

.PHONY: run test vet fmtcheck bench bench-short fuzz torture

SHELL := /bin/bash

# The ledger demonstration: kill -9 part way through, restart, check. The
# first build on a new machine downloads and compiles every dependency
# (minutes on 2 cores): it says so, and counts the packages as they build.
# GOWORK=off: the demonstration needs the library module only, not what the
# bench and torture modules download.
run:
	@set -o pipefail; \
	echo "make run: building the ledger example into target/ledger"; \
	echo "  (the first build on a new machine downloads the modules and compiles them: a few minutes on 2 cores)"; \
	GOWORK=off $(GO) mod download -x 2>&1 | awk '/^# get .*\.zip$$/ {n++; if (n % 10 == 1) {print "  downloading modules: " n; fflush()}}'; \
	GOWORK=off $(GO) build -v -o target/ledger ./examples/ledger 2>&1 | \
		awk '{n++; if (n % 20 == 1) {print "  compiled " n " packages, now " $$0; fflush()}} END {print "  compiled " n+0 " packages"}'
	./target/ledger demo

# What CI runs: formatting, vet, and every test (crash tests included) with
# the race detector; then, without cgo (which the race detector needs), the
# tests of the memory limit, which differs there: Pebble's block cache and
# memtables are Go heap without cgo.
test: fmtcheck vet
	@set -e; for m in $(MODULES); do \
		echo "go test -race ($$m)"; \
		(cd $$m && $(GO) test -race -count=1 -timeout 20m $(PKGS)); \
	done
	@echo "go test without cgo (the memory limit)"
	CGO_ENABLED=0 $(GO) test -count=1 -run 'MemoryLimit' ./state

fmtcheck:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

vet:
	@set -e; for m in $(MODULES); do (cd $$m && $(GO) vet $(PKGS)); done

# The stores of every account that the ledger rows set up (1,000,000 and
# 10,000,000 accounts: 5 GB, 15 to 20 minutes to make), and those rows 16
# and 18 fill (10,000,000 keys, 1 GB of values), are kept here and reused
# by the next make bench; remove the folder after a change of the store's
# format.
BENCH_SETUPS ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/tidemark-bench/setups

# Then the scale-out rows, which need a NATS server and a PostgreSQL
# cluster (both started by the benchmarks themselves): one worker on
# JetStream partitions with its state in PostgreSQL, against a bare pull
# consumer, and the PostgreSQL store against a bare pgx loop, each ratio
# against a baseline of the same run. They print their rows; bench/RESULTS.md
# keeps them in its section "The partitioned ledger (bench/scale)", which
# benchtable does not write.
bench:
	$(GO) run ./bench/cmd/benchtable -setups $(BENCH_SETUPS)
	cd bench && $(GO) test ./scale -run '^$$' -bench . -benchtime 1x -timeout 30m
	$(GO) test ./state -run '^$$' -bench 'ApplyLedger/postgres/batch=10000$$|PostgresBareLedger/batch=10000' -benchtime 2000000x -count 3

bench-short:
	$(GO) run ./bench/cmd/benchtable -short

# Every fuzz target for FUZZTIME each (TestMakeFuzzRunsEveryTarget fails when
# one is missing here). Their seeds, in the tests and under each package's
# testdata/fuzz, run in make test as ordinary tests.
FUZZTIME ?= 30s
fuzz:
	$(GO) test ./feed/pointer -run '^$$' -fuzz '^FuzzDecode$$' -fuzztime $(FUZZTIME) -fuzzminimizetime 1s
	$(GO) test ./feed -run '^$$' -fuzz '^FuzzFramer$$' -fuzztime $(FUZZTIME)
	$(GO) test ./framework -run '^$$' -fuzz '^FuzzLoadConfig$$' -fuzztime $(FUZZTIME)
	$(GO) test ./examples/ledger -run '^$$' -fuzz '^FuzzParseLine$$' -fuzztime $(FUZZTIME)
	$(GO) test ./examples/ledger -run '^$$' -fuzz '^FuzzParseAmount$$' -fuzztime $(FUZZTIME)
	$(GO) test ./examples/ledger -run '^$$' -fuzz '^FuzzParseOutput$$' -fuzztime $(FUZZTIME)
	$(GO) test ./examples/ledger -run '^$$' -fuzz '^FuzzReadRejects$$' -fuzztime $(FUZZTIME)
	$(GO) test ./examples/ledger -run '^$$' -fuzz '^FuzzReadPGFolder$$' -fuzztime $(FUZZTIME)
	$(GO) test ./state -run '^$$' -fuzz '^FuzzScanTail$$' -fuzztime $(FUZZTIME)
	$(GO) test ./state -run '^$$' -fuzz '^FuzzReadStoreFile$$' -fuzztime $(FUZZTIME)
	$(GO) test ./vfs -run '^$$' -fuzz '^FuzzFlockHolder$$' -fuzztime $(FUZZTIME)
	$(GO) test ./feed/natsfeed -run '^$$' -fuzz '^FuzzSubjectMatches$$' -fuzztime $(FUZZTIME)
	$(GO) test ./feed/natsfeed -run '^$$' -fuzz '^FuzzParseAck$$' -fuzztime $(FUZZTIME)
	$(GO) test ./feed/pointer -run '^$$' -fuzz '^FuzzParseRegistry$$' -fuzztime $(FUZZTIME)
	$(GO) test ./state -run '^$$' -fuzz '^FuzzBoltCheck$$' -fuzztime $(FUZZTIME)
	$(GO) test ./state -run '^$$' -fuzz '^FuzzStoreRecords$$' -fuzztime $(FUZZTIME)
	$(GO) test ./state -run '^$$' -fuzz '^FuzzCheckManifest$$' -fuzztime $(FUZZTIME)

# The long versions of the reliability scenarios (see RELIABILITY.md).
torture:
	cd torture && TIDEMARK_TORTURE=1 $(GO) test -race -count=1 -timeout 240m -v ./...
