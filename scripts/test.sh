#!/usr/bin/env bash
# The whole test suite, exactly as CI runs it (.ci/run calls this script):
#   1. installs and starts the real servers the integration tests need
#      (Mosquitto, ClickHouse, Cassandra; see scripts/servers.sh),
#   2. static checks: gofmt, go vet, staticcheck,
#   3. every test with the race detector, integration tests included,
#   4. a short run of every fuzz target.
# Knobs: SLUICE_TEST_SERVERS="mosquitto clickhouse" starts only those (empty:
# none; tests needing a missing server then skip, or fail under CI=true);
# SLUICE_FUZZTIME (default 10s per target); SLUICE_KEEP_SERVERS=1 leaves the
# servers running afterwards.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

step() { printf '\n==> %s\n' "$*"; }

servers=${SLUICE_TEST_SERVERS-mosquitto clickhouse cassandra}
if [ -n "$servers" ]; then
	if [[ " $servers " == *" mosquitto "* ]] && [ -z "${SLUICE_KEEP_SERVERS:-}" ]; then
		# Start from an empty broker: sessions and backlogs saved by earlier
		# runs (benchmarks queue hundreds of MB) only slow its restarts.
		bash scripts/servers.sh clean mosquitto
	fi
	step "starting test servers: $servers"
	# shellcheck disable=SC2086
	bash scripts/servers.sh up $servers
	if [ -z "${SLUICE_KEEP_SERVERS:-}" ]; then
		# shellcheck disable=SC2086
		trap 'bash scripts/servers.sh down '"$servers"' >/dev/null 2>&1 || true' EXIT
	fi
fi

step "gofmt"
unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))
if [ -n "$unformatted" ]; then
	echo "gofmt would change:"; echo "$unformatted"; exit 1
fi

step "go vet"
go vet ./...

step "staticcheck"
go tool staticcheck ./...

step "go test -race (unit and integration)"
go test -race -count=1 -timeout 30m ./... 2>&1 | tee /tmp/sluice-test.out

step "fuzz (${SLUICE_FUZZTIME:-10s} per target)"
bash scripts/fuzz.sh

step "all tests passed"
