# Every target runs against real redis-server processes the tests start
# themselves on free loopback ports (redis-server must be on PATH; set
# DLOCK_REDIS_SERVER=/usr/bin/valkey-server to run the tests on Valkey).

GO ?= go

.PHONY: test race lint bench bench-peers faults soak demo ci

test:
	$(GO) test -count=1 ./...

race:
	$(GO) test -race -count=1 ./...

lint:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); exit 1; }
	$(GO) vet ./...
	$(GO) run honnef.co/go/tools/cmd/staticcheck@v0.8.2 ./...

bench:
	$(GO) test -run '^$$' -bench . -count 5 .

# Side-by-side with redsync, bsm/redislock and rueidislock (own module).
bench-peers:
	cd bench && $(GO) run .

# The fault-injection suite with its report table (quick tier).
faults:
	cd faults && $(GO) test -race -count=1 -timeout 15m -v -run . . | grep -v '^redis: '

# The seeded random-mix soak (minutes).
soak:
	cd faults && DLOCK_SOAK=1 $(GO) test -count=1 -timeout 60m -v -run Soak .

demo:
	$(GO) run ./cmd/dlock demo

ci:
	bash .ci/run
