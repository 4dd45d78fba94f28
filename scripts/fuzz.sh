#!/usr/bin/env bash
# Runs every Go fuzz target of the module for SLUICE_FUZZTIME (default 10s)
# each. go test -fuzz takes one target in one package per run.
#
# Go 1.26's fuzzing coordinator can fail a target with a bare "context
# deadline exceeded" when -fuzztime runs out while a worker is mid-input
# (golang/go#75804, fixed in Go 1.27). Such a run writes no failing input.
# A run that fails that way, and wrote nothing under testdata/fuzz/<target>,
# is reported as that flake and its corpus replayed with go test -run; any
# other failure, or a written input, fails the script.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for pkg in $(go list ./...); do
	dir=$(go list -f '{{.Dir}}' "$pkg")
	for target in $(grep -ho '^func Fuzz[A-Za-z0-9_]*' "$dir"/*_test.go 2>/dev/null | sed 's/^func //' | sort -u); do
		echo "fuzz $pkg $target"
		corpus="$dir/testdata/fuzz/$target"
		before=$(ls "$corpus" 2>/dev/null | sort || true)
		if go test -run='^$' -fuzz="^${target}\$" -fuzztime="${SLUICE_FUZZTIME:-10s}" "$pkg" >"$out" 2>&1; then
			cat "$out"
			continue
		fi
		cat "$out"
		after=$(ls "$corpus" 2>/dev/null | sort || true)
		if [[ "$before" == "$after" ]] && grep -q '^    context deadline exceeded$' "$out" && ! grep -q 'Failing input written' "$out"; then
			echo "fuzz $pkg $target: Go's fuzz-deadline flake (golang/go#75804), no failing input written; replaying the corpus"
			go test -count=1 -run="^${target}\$" "$pkg"
			continue
		fi
		echo "fuzz $pkg $target: FAILED" >&2
		exit 1
	done
done
