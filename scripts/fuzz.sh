#!/usr/bin/env bash
# Runs every Go fuzz target of the module for SLUICE_FUZZTIME (default 10s)
# each. go test -fuzz takes one target in one package per run.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
for pkg in $(go list ./...); do
	dir=$(go list -f '{{.Dir}}' "$pkg")
	for target in $(grep -ho '^func Fuzz[A-Za-z0-9_]*' "$dir"/*_test.go 2>/dev/null | sed 's/^func //' | sort -u); do
		echo "fuzz $pkg $target"
		go test -run='^$' -fuzz="^${target}\$" -fuzztime="${SLUICE_FUZZTIME:-10s}" "$pkg"
	done
done
