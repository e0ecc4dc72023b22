#!/usr/bin/env bash
# Lists the test packages of a `go test ./...` log by time, slowest first,
# so the suite's growth is watched (CONTRIBUTING.md has the budget).
# Usage: hack/slowest-tests.sh LOG [N]
set -euo pipefail
awk '$1 == "ok" || $1 == "FAIL" { if ($3 ~ /s$/) { t = $3; sub(/s$/, "", t); printf "%8.1fs  %s\n", t, $2 } }' "$1" |
  sort -rn | head -n "${2:-10}"
