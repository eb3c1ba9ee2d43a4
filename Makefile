# Every target runs against real redis-server processes the tests start
# themselves on free loopback ports (redis-server must be on PATH).

GO ?= go

.PHONY: test race lint bench demo ci

test:
	$(GO) test -count=1 ./...

race:
	$(GO) test -race -count=1 ./...

lint:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); exit 1; }
	$(GO) vet ./...

bench:
	$(GO) test -run '^$$' -bench . -count 5 .

demo:
	$(GO) run ./cmd/dlock demo

ci:
	bash .ci/run
