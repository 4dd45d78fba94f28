# Targets are exactly what CI runs, in pieces. `make ci` = scripts/test.sh.
GO ?= go
.PHONY: check fmt vet lint test race integration fuzz bench servers ci run

run:                 ## the gateway on its embedded defaults
	$(GO) run ./cmd/ingest
check: fmt vet lint  ## static checks only
fmt:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || (gofmt -l $$(git ls-files '*.go'); exit 1)
vet:
	$(GO) vet ./...
lint:
	$(GO) tool staticcheck ./...
test:                ## unit tests; tests that need servers skip
	$(GO) test -short ./...
race:
	$(GO) test -race ./...
servers:             ## install and start Mosquitto, ClickHouse, Cassandra
	bash scripts/servers.sh up
integration: servers
	$(GO) test -race -count=1 ./...
fuzz:
	SLUICE_FUZZTIME=30s bash scripts/fuzz.sh
bench:
	$(GO) test -run='^$$' -bench=. -benchmem ./... | tee bench.txt
ci:
	bash scripts/test.sh
