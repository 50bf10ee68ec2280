# tidemark: the commands a newcomer and CI use. See README.md.
GO ?= go
PKGS := ./...

.PHONY: run test vet fmtcheck bench bench-short fuzz torture

# The ledger demonstration: kill -9 part way through, restart, check.
run:
	$(GO) run ./examples/ledger demo

# What CI runs: formatting, vet, and every test (crash tests included) with
# the race detector.
test: fmtcheck vet
	$(GO) test -race -count=1 -timeout 20m $(PKGS)

fmtcheck:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet $(PKGS)

bench:
	$(GO) run ./bench/cmd/benchtable

bench-short:
	$(GO) run ./bench/cmd/benchtable -short

# Every fuzz target for FUZZTIME each. The seed corpora under each package's
# testdata/fuzz run in make test as ordinary tests.
FUZZTIME ?= 30s
fuzz:
	$(GO) test ./feed -run '^$$' -fuzz '^FuzzDecodePointer$$' -fuzztime $(FUZZTIME) -fuzzminimizetime 1s
	$(GO) test ./feed -run '^$$' -fuzz '^FuzzFramer$$' -fuzztime $(FUZZTIME)
	$(GO) test ./framework -run '^$$' -fuzz '^FuzzLoadConfig$$' -fuzztime $(FUZZTIME)
	$(GO) test ./examples/ledger -run '^$$' -fuzz '^FuzzParseLine$$' -fuzztime $(FUZZTIME)
	$(GO) test ./examples/ledger -run '^$$' -fuzz '^FuzzReadRejects$$' -fuzztime $(FUZZTIME)

# The long versions of the reliability scenarios (see RELIABILITY.md).
torture:
	TIDEMARK_TORTURE=1 $(GO) test -race -count=1 -timeout 120m -v ./torture/
