#!/usr/bin/env bash
# The whole test suite, exactly as CI runs it (.ci/run calls this script):
#   1. installs and starts the real servers the integration tests need
#      (Mosquitto, ClickHouse, Cassandra; see scripts/servers.sh) and the
#      test tools (promtool),
#   2. static checks: gofmt, go vet, staticcheck,
#   3. every test with the race detector, integration tests included, with a
#      progress line every SLUICE_PROGRESS_EVERY seconds (default 60) naming
#      the test binaries still running,
#   4. a short run of every fuzz target.
# Knobs: SLUICE_TEST_SERVERS="mosquitto clickhouse" starts only those (empty:
# none; tests needing a missing server then skip, or fail under CI=true);
# SLUICE_FUZZTIME (default 10s per target); SLUICE_KEEP_SERVERS=1 leaves the
# servers running afterwards.
#
# Two runs on one machine share the servers (scripts/servers.sh, one
# SLUICE_SERVERS_DIR) but nothing else: each keeps its output in a directory
# of its own (kept, and named, when a test fails). Each run holds a shared
# lock on $SLUICE_SERVERS_DIR/.runs.lock; the start-up clean of Mosquitto
# and the final stop of the servers happen only in a run that can take it
# exclusively, i.e. when no other run is using the servers (decided under
# $SLUICE_SERVERS_DIR/.runs.setup.lock, one run at a time).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

step() { printf '\n==> %s\n' "$*"; }

run_dir=$(mktemp -d "${TMPDIR:-/tmp}/sluice-test.XXXXXX")
keep_run_dir=0
servers=${SLUICE_TEST_SERVERS-mosquitto clickhouse cassandra}
stop_servers=0

state_root=${SLUICE_SERVERS_DIR:-/tmp/sluice-servers}

cleanup() {
	local rc=$?
	if ((stop_servers)); then
		# Under the setup lock: no other run is between deciding it is alone
		# and holding its shared lock.
		exec 7>>"$state_root/.runs.setup.lock"
		flock -x 7
		if flock -n -x 8; then
			# shellcheck disable=SC2086
			bash scripts/servers.sh down $servers >/dev/null 2>&1 || true
		fi
	fi
	if ((!keep_run_dir)); then
		rm -rf "$run_dir"
	fi
	exit "$rc"
}
trap cleanup EXIT

if [ -n "$servers" ]; then
	mkdir -p "$state_root"
	# fd 8 stays open (shared-locked) for the whole run; servers.sh starts
	# the servers without it, so they never hold it. fd 7, the setup lock,
	# makes deciding, cleaning, starting and taking the shared lock one step
	# among runs (converting a lock is not atomic).
	exec 7>>"$state_root/.runs.setup.lock"
	flock -x 7
	exec 8>>"$state_root/.runs.lock"
	alone=0
	if flock -n -x 8; then
		alone=1
	fi
	if ((alone)) && [[ " $servers " == *" mosquitto "* ]] && [ -z "${SLUICE_KEEP_SERVERS:-}" ]; then
		# Start from an empty broker: sessions and backlogs saved by earlier
		# runs (benchmarks queue hundreds of MB) only slow its restarts. Only
		# when no other run is using it.
		bash scripts/servers.sh clean mosquitto
	fi
	step "starting test servers: $servers"
	# shellcheck disable=SC2086
	bash scripts/servers.sh up $servers
	flock -s 8
	exec 7>&-
	if [ -z "${SLUICE_KEEP_SERVERS:-}" ]; then
		stop_servers=1
	fi
fi

step "test tools (promtool)"
if ! bash scripts/servers.sh tools; then
	if [ "${CI:-}" = true ]; then
		exit 1
	fi
	echo "promtool could not be installed: the alert rules test will skip"
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

# progress GOPID: every SLUICE_PROGRESS_EVERY seconds, prints the test
# binaries GOPID (go test) is running and how long each has run. go test
# prints a package's result only after every package listed before it, so a
# long package hides the others' progress without this.
progress() {
	local gopid=$1 start=$SECONDS running
	while sleep "${SLUICE_PROGRESS_EVERY:-60}"; do
		kill -0 "$gopid" 2>/dev/null || return 0
		running=$(ps -o etimes=,args= --ppid "$gopid" 2>/dev/null |
			awk '{ n = split($2, p, "/"); if (p[n] ~ /\.test$/) printf " %s(%ds)", p[n], $1 }' || true)
		printf '[progress %dm%02ds] running:%s\n' $(((SECONDS - start) / 60)) $(((SECONDS - start) % 60)) "${running:- (building)}"
	done
}

step "go test -race (unit and integration)"
out=$run_dir/go-test.out
: >"$out" # exists before tail opens it
go test -race -count=1 -timeout 30m ./... >"$out" 2>&1 &
gopid=$!
progress "$gopid" &
progress_pid=$!
tail -n +1 -f --pid="$gopid" "$out"
rc=0
wait "$gopid" || rc=$?
kill "$progress_pid" 2>/dev/null || true
wait "$progress_pid" 2>/dev/null || true
if ((rc != 0)); then
	keep_run_dir=1
	printf '\ngo test failed (exit %d); its whole output is in %s; the failures:\n' "$rc" "$out"
	grep -E '^(--- FAIL|FAIL|panic:)' "$out" | tail -n 60 || true
	exit "$rc"
fi

step "fuzz (${SLUICE_FUZZTIME:-10s} per target)"
bash scripts/fuzz.sh

step "all tests passed"
