#!/usr/bin/env bash
# `make test`: every test, in the order that keeps a cold two-core machine
# busy with work done once.
#
#  1. The control plane's build (Kubernetes' commands, etcd, kwok, kubectl
#     and kubemark in one `go build`) starts at once. It compiles most of
#     the packages claimscale itself imports (the same modules at the same
#     versions, the same flags), so go vet and the tests wait for it and
#     find them compiled: started side by side, the two compiled them
#     twice. Beside it run the generators and the generated-files check.
#  2. The tools only a few tests use (Cluster API, Kueue, Prometheus,
#     helm) build at a lower priority from the start and go on beside the
#     tests, which leave cores idle while they wait on their control planes;
#     a test that needs one waits for its build (testenv.Tool), and the
#     chart is linted once helm is there.
#  3. go vet, then the tests, the longest package first.
#
# Each background build is its own process group, stopped when this
# script stops. Environment: GO_TEST_FLAGS, BUILD_GOGC (the Makefile's).
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p bin

groups=()
stop_background() {
  local group
  for group in "${groups[@]}"; do kill -- "-$group" 2>/dev/null || true; done
}
trap stop_background EXIT

setsid hack/tools.sh e2e > bin/tools.log 2>&1 &
control_plane=$!
groups+=("$control_plane")
# A new session is a new scheduling autogroup on Linux, among which CPU is
# shared by the group's own nice (/proc/self/autogroup), not its
# processes': without it, `nice` alone left these builds an equal share
# beside the control plane's and it finished last.
setsid bash -c 'echo 5 > /proc/self/autogroup 2>/dev/null || true
  exec nice -n 10 bash -c "hack/tools.sh few-tests && make --no-print-directory lint-chart"' > bin/tools-few.log 2>&1 &
few_tests=$!
groups+=("$few_tests")

make --no-print-directory verify-generated
if ! wait "$control_plane"; then
  cat bin/tools.log
  echo "make test: building the control plane failed (above)" >&2
  exit 1
fi
cat bin/tools.log
make --no-print-directory vet

# Only the compiles get BUILD_GOGC: the test binaries run with the
# environment's own GOGC.
run_tests_with="env -u GOGC${GOGC:+ GOGC=$GOGC}"
status=0
# The longest package first: go test starts packages in the order they
# are named, two at a time, and autoscaling's end-to-end tests take longer
# than all other packages but integration together; named first, the rest
# run beside it, and integration, which needs the tools still building in
# the background, comes last.
GOGC="${BUILD_GOGC:-400}" go test -exec "$run_tests_with" ${GO_TEST_FLAGS:--count=1} -timeout 30m ./test/e2e/autoscaling ./... 2>&1 | tee bin/test.log || status=$?
hack/slowest-tests.sh bin/test.log > bin/test-times.txt
if [ "$status" -ne 0 ]; then
  exit "$status"
fi
if ! wait "$few_tests"; then
  cat bin/tools-few.log
  echo "make test: building the tools of a few tests or linting the chart failed (above)" >&2
  exit 1
fi
cat bin/tools-few.log
