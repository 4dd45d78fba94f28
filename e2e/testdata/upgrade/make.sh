#!/usr/bin/env bash
# Writes store-<rev>.tar.gz: the data directory of a gateway built from
# commit REV (default 10a3f17, the last main before typed metric values)
# after it stored the readings of readings.ndjson and stopped cleanly.
# TestUpgradeFromFloatOnlyStore opens it with the current gateway.
#
# Usage: e2e/testdata/upgrade/make.sh [REV]   (from anywhere in the repo)
set -euo pipefail
rev=${1:-10a3f17}
here=$(cd "$(dirname "$0")" && pwd)
repo=$(git -C "$here" rev-parse --show-toplevel)
work=$(mktemp -d)
trap 'git -C "$repo" worktree remove --force "$work/src" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT

git -C "$repo" worktree add --detach "$work/src" "$rev" >/dev/null
(cd "$work/src" && go build -o "$work/ingest" ./cmd/ingest)

mkdir "$work/run"
cd "$work/run" # no configs/ingest.yaml here: built-in defaults
SLUICE_HTTP_ADDR=127.0.0.1:18089 SLUICE_DATA_DIR="$work/data" \
	SLUICE_AUTH_TOKENS=e2e-token-1=acme SLUICE_RETENTION_ENABLED=false \
	SLUICE_RETENTION_READINGS=20y SLUICE_ROLLUPS_ROLL_DELAY=1s SLUICE_HTTP_DRAIN_DELAY=0s \
	"$work/ingest" 2>"$work/ingest.log" &
pid=$!
for _ in $(seq 100); do
	curl -fsS http://127.0.0.1:18089/readyz >/dev/null 2>&1 && break
	sleep 0.1
done
curl -fsS -X POST -H 'Authorization: Bearer e2e-token-1' -H 'Content-Type: application/x-ndjson' \
	--data-binary @"$here/readings.ndjson" http://127.0.0.1:18089/v1/readings
echo
sleep 5 # past roll_delay: the rollups of the readings are written
kill -TERM "$pid"
wait "$pid"
tar -C "$work/data" -czf "$here/store-$rev.tar.gz" .
echo "wrote $here/store-$rev.tar.gz"
