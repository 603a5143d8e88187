# agentd: run `make help` for the targets.
.DEFAULT_GOAL := help
GO ?= go
NODE_TEST_DIRS := $(patsubst %/package-lock.json,%,$(wildcard test/*/package-lock.json sdk/typescript/package-lock.json))

.PHONY: help run fakellm node-deps test test-short lint build chaos failover bench fuzz

help: ## list the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  %-12s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

run: ## run the server against the local PostgreSQL (the fake model unless OPENAI_API_KEY is set)
	@echo "compiling agentd (the first build takes a minute)..."
	$(GO) run ./cmd/server

fakellm: ## run the fake OpenAI-compatible model alone on 127.0.0.1:8090
	$(GO) run ./cmd/fakellm

node-deps: ## install the npm packages of the tests that drive Node.js clients (test/*/package-lock.json), all at once
	@pids=""; for d in $(NODE_TEST_DIRS); do (cd $$d && npm ci --no-audit --no-fund --loglevel=error >/dev/null) & pids="$$pids $$!"; done; \
	fail=0; for p in $$pids; do wait $$p || fail=1; done; \
	if [ $$fail -ne 0 ]; then echo "npm ci failed in one of: $(NODE_TEST_DIRS)"; exit 1; fi; echo "npm packages installed in $(NODE_TEST_DIRS)"

test: ## run every test with the race detector, then each fuzz target for 20,000 inputs (needs the local PostgreSQL, Node.js and npm)
	$(MAKE) --no-print-directory node-deps
	AGENTD_REQUIRE_NODE=1 $(GO) test -race -count=1 -timeout 20m ./...
	$(MAKE) --no-print-directory fuzz FUZZTIME=20000x

test-short: ## the fast tier, to run while you work: go test -short, without the race detector or the tests that start processes, drive Node.js or a browser, or fail PostgreSQL over (needs the local PostgreSQL)
	$(GO) test -short -timeout 10m ./...

lint: ## gofmt, go vet, and staticcheck when installed
	@test -z "$$(gofmt -l .)" || (gofmt -l . && exit 1)
	$(GO) vet ./...
	@if command -v staticcheck >/dev/null; then staticcheck ./...; else echo "staticcheck not installed: skipped"; fi

build: ## build the server and the fake model into bin/
	$(GO) build -o bin/agentd ./cmd/server
	$(GO) build -o bin/fakellm ./cmd/fakellm

chaos: ## the full chaos run: 3 server processes, 400 kills (a fifth of them SIGTERM), 10 PostgreSQL restarts (restarts the local server!)
	AGENTD_CHAOS_KILLS=400 AGENTD_CHAOS_PG_RESTARTS=10 $(GO) test -count=1 -timeout 30m -run TestChaosKill -v ./cmd/server/

failover: ## the long failover run: agentd on a pg_auto_failover formation the test starts, 10 primary kills, 10 standby promotions (needs pg_autoctl: apt-get install postgresql-15-auto-failover)
	AGENTD_REQUIRE_FAILOVER=1 AGENTD_FAILOVER_ROUNDS=$(or $(ROUNDS),10) $(GO) test -race -count=1 -timeout 60m -run TestFailover -v ./cmd/server/

fuzz: ## fuzz the gate of outside values, the POST /runs decoder and the streamed chunk decoder for FUZZTIME each (default 2m); make test runs their seed corpus
	$(GO) test -run '^$$' -fuzz '^FuzzJSON$$' -fuzztime $(or $(FUZZTIME),2m) ./internal/clean
	$(GO) test -run '^$$' -fuzz '^FuzzText$$' -fuzztime $(or $(FUZZTIME),2m) ./internal/clean
	$(GO) test -run '^$$' -fuzz '^FuzzCreateRunBody$$' -fuzztime $(or $(FUZZTIME),2m) ./api
	$(GO) test -run '^$$' -fuzz '^FuzzDecodeTextChunk$$' -fuzztime $(or $(FUZZTIME),2m) ./internal/llm

bench: ## print agentd's figures on this machine, 3 repetitions (about 5 minutes; docs/benchmarks.md), all in bin/agentbench.json
	$(GO) build -o bin/agentbench ./cmd/agentbench && ./bin/agentbench -json bin/agentbench.json
