#!/usr/bin/env bash
# Builds the control-plane and code-generation binaries from pinned Go
# modules, once per version, into a per-user cache, and links them into bin/.
# Nothing is downloaded but Go modules, so a fresh machine needs only the
# module proxy.
#
# Usage: hack/tools.sh [name or group...]   (default: all)
# Groups: demo (what a local control plane with kwok needs), generate
# (controller-gen and the protobuf generators), chart (helm), e2e (the
# control plane, kubectl and kubemark: what every end-to-end test needs),
# few-tests (what only a few tests use: Cluster API, Kueue, Prometheus,
# helm), test (all).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
bin="$root/bin"
mkdir -p "$bin"

KUBE_VERSION=v1.37.0
# etcd and kwok are built from hack/tools/go.mod beside Kubernetes (see
# shared_commands): keep these equal to their versions there, etcd at the
# release of the client kube-apiserver uses.
ETCD_VERSION=v3.7.0
KWOK_VERSION=v0.8.0
CONTROLLER_TOOLS_VERSION=v0.21.0
PROTOC_GEN_GO_VERSION=v1.36.10
PROTOC_GEN_GO_GRPC_VERSION=v1.5.1
HELM_VERSION=v3.20.0
BUF_VERSION=v1.75.0
CLUSTER_API_VERSION=v1.14.2
KUEUE_VERSION=v0.17.0 # keep equal to hack/kueue/go.mod
PROMETHEUS_VERSION=v0.316.0 # the Go module version of Prometheus 3.x, see hack/prometheus/go.mod

cache="${XDG_CACHE_HOME:-$HOME/.cache}/claimscale/tools"

# The compiler collects garbage less often: a first build is a fifth faster
# (the Makefile's BUILD_GOGC says why). Nothing this script starts runs
# but the go command.
export GOGC="${BUILD_GOGC:-400}"
mkdir -p "$cache"

ldflags_kube="-s -w -X k8s.io/component-base/version.gitVersion=$KUBE_VERSION -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=37 -X k8s.io/component-base/version.gitTreeState=clean"

# cached NAME VERSION: the cache path of a tool's binary.
cached() { echo "$cache/$1/$2/$1"; }

# provide NAME VERSION MODULE BUILD-COMMAND...: runs the build into the
# cache unless the cached binary exists, then links it into bin/. Each tool
# has its own lock, so parallel make targets and test packages that ask for
# different tools build them at the same time, and the same tool only once.
provide() {
  local name=$1 version=$2 module=$3; shift 3
  local dir="$cache/$name/$version"
  mkdir -p "$cache/.locks"
  (
    exec 9>"$cache/.locks/$name-$version"
    flock 9
    if [ ! -e "$dir/$name" ]; then
      echo "building $name $version from $module (first time on this machine; cached afterwards)" >&2
      rm -rf "$dir.tmp" && mkdir -p "$dir.tmp"
      if ! OUT="$dir.tmp" "$@"; then
        echo "hack/tools.sh: building $name from module $module failed" >&2
        exit 1
      fi
      rm -rf "$dir" && mv "$dir.tmp" "$dir"
    fi
  )
  ln -sf "$dir/$name" "$bin/$name"
}

# The Kubernetes commands, etcd and kwok share most of their packages:
# one `go build` in hack/tools for all that are missing compiles each shared
# package once. They are built with the go command's defaults (no
# -trimpath, cgo as the machine has it), the same as `go build` and `go
# test` of claimscale itself, whose module pins the same Kubernetes: then
# the Kubernetes packages compiled here are the ones claimscale's build and
# tests find in the build cache, and a cold machine compiles them once, not
# twice.
shared_tools=(kube-apiserver kube-scheduler kube-controller-manager kubectl kubemark etcd kwok)
shared_package() {
  case "$1" in
    etcd) echo go.etcd.io/etcd/server/v3 ;;
    kwok) echo sigs.k8s.io/kwok/cmd/kwok ;;
    *) echo "k8s.io/kubernetes/cmd/$1" ;;
  esac
}
# kwok's cache key names the Kubernetes it is built against: a kwok built
# alone, against its own go.mod, is another binary.
shared_version() {
  case "$1" in
    etcd) echo "$ETCD_VERSION" ;;
    kwok) echo "$KWOK_VERSION-kube$KUBE_VERSION" ;;
    *) echo "$KUBE_VERSION" ;;
  esac
}
shared_commands() {
  local missing=() cmd
  for cmd in "$@"; do
    [ -e "$(cached "$cmd" "$(shared_version "$cmd")")" ] || missing+=("$cmd")
  done
  if [ ${#missing[@]} -gt 1 ]; then
    mkdir -p "$cache/.locks"
    (
      exec 9>"$cache/.locks/shared-build"
      flock 9
      local out="$cache/shared-build.tmp" pkgs=() todo=() pkg built
      for cmd in "${missing[@]}"; do
        [ -e "$(cached "$cmd" "$(shared_version "$cmd")")" ] || { todo+=("$cmd"); pkgs+=("$(shared_package "$cmd")"); }
      done
      [ ${#todo[@]} -gt 0 ] || exit 0
      echo "building ${todo[*]} from hack/tools/go.mod (Kubernetes $KUBE_VERSION, etcd $ETCD_VERSION, kwok $KWOK_VERSION; first time on this machine; cached afterwards)" >&2
      rm -rf "$out" && mkdir -p "$out"
      if ! (cd "$root/hack/tools" && go build -ldflags "$ldflags_kube" -o "$out/" "${pkgs[@]}"); then
        echo "hack/tools.sh: building ${todo[*]} from hack/tools/go.mod failed" >&2
        exit 1
      fi
      for cmd in "${todo[@]}"; do
        built=$(binary_of "$(shared_package "$cmd")")
        mkdir -p "$cache/$cmd/$(shared_version "$cmd")"
        mv "$out/$built" "$(cached "$cmd" "$(shared_version "$cmd")")"
      done
      rm -rf "$out"
    )
  fi
  for cmd in "$@"; do
    provide "$cmd" "$(shared_version "$cmd")" "$(shared_package "$cmd") (hack/tools/go.mod)" build_shared "$cmd"
  done
}

# binary_of PACKAGE: the file `go build -o DIR/` writes for a main package,
# named by its last path element, or the one before a major version
# (go.etcd.io/etcd/server/v3 is "server").
binary_of() {
  local name=${1##*/}
  if [[ "$name" =~ ^v[0-9]+$ ]]; then
    name=${1%/*}
    name=${name##*/}
  fi
  echo "$name"
}

build_shared() { # $1: one of shared_tools
  (cd "$root/hack/tools" && go build -ldflags "$ldflags_kube" -o "$OUT/$1" "$(shared_package "$1")")
}
# prometheus and promtool for the alert rule tests and the monitoring e2e
# test. Built without the web UI's assets: the HTTP API is all they need;
# and without the service discoveries of the clouds (Prometheus' README,
# "remove_all_sd" keeps static, file and http): the tests scrape a static
# target, and the clouds' SDKs were most of the compile. Both in one go
# build: they share most of their packages, and two builds side by side
# compiled each of those twice (a cold machine's build cache does not
# dedupe compiles that run at the same time).
prometheus_build() { # go build arguments
  (cd "$root/hack/prometheus" && CGO_ENABLED=0 go build -tags remove_all_sd -trimpath -ldflags "-s -w" "$@")
}
build_prometheus() {
  prometheus_build -o "$OUT/" github.com/prometheus/prometheus/cmd/prometheus github.com/prometheus/prometheus/cmd/promtool
}
# promtool comes from prometheus' build; a cache from before both were built
# together has no promtool there, and builds it alone.
copy_promtool() {
  local built
  built="$(cached prometheus "$PROMETHEUS_VERSION")"
  if [ -e "${built%/*}/promtool" ]; then
    cp "${built%/*}/promtool" "$OUT/promtool"
  else
    prometheus_build -o "$OUT/promtool" github.com/prometheus/prometheus/cmd/promtool
  fi
}
# kwok runs nothing without stages; they ship in its module, so join the
# ones we use into one config file next to the binary.
build_kwok_stages() {
  local src
  src="$(go env GOMODCACHE)/sigs.k8s.io/kwok@$KWOK_VERSION/kustomize/stage"
  [ -d "$src" ] || go mod download "sigs.k8s.io/kwok@$KWOK_VERSION"
  local first=1
  for f in node/fast/node-initialize.yaml node/heartbeat/node-heartbeat.yaml pod/fast/pod-ready.yaml pod/fast/pod-complete.yaml pod/fast/pod-delete.yaml; do
    [ $first -eq 1 ] || echo "---"
    first=0
    cat "$src/$f"
  done > "$OUT/kwok-stages.yaml"
}
# The Cluster API core manager (Cluster, Machine, MachineSet,
# MachineDeployment controllers) for the clusterapi e2e tests; its CRDs are
# read from the module cache (core/config/crd/bases).
build_capi() {
  (cd "$root/hack/capi" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$OUT/cluster-api-manager" sigs.k8s.io/cluster-api/core)
}
# Kueue's manager for the batch e2e tests (a ProvisioningRequest admission
# check against claimscale); its CRDs are read from the module cache
# (config/components/crd/bases).
build_kueue() {
  (cd "$root/hack/kueue" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$OUT/kueue-manager" sigs.k8s.io/kueue/cmd/kueue)
}
install_module() { # $1: package@version
  GOBIN="$OUT" CGO_ENABLED=0 go install -trimpath -ldflags "-s -w" "$1"
}

one() {
  case "$1" in
    kube-apiserver|kube-scheduler|kube-controller-manager|kubectl|kubemark|etcd|kwok) shared_commands "$1" ;;
    kwok-stages.yaml) provide kwok-stages.yaml "$KWOK_VERSION" "sigs.k8s.io/kwok@$KWOK_VERSION" build_kwok_stages ;;
    controller-gen) provide controller-gen "$CONTROLLER_TOOLS_VERSION" "sigs.k8s.io/controller-tools@$CONTROLLER_TOOLS_VERSION" install_module "sigs.k8s.io/controller-tools/cmd/controller-gen@$CONTROLLER_TOOLS_VERSION" ;;
    protoc-gen-go) provide protoc-gen-go "$PROTOC_GEN_GO_VERSION" "google.golang.org/protobuf@$PROTOC_GEN_GO_VERSION" install_module "google.golang.org/protobuf/cmd/protoc-gen-go@$PROTOC_GEN_GO_VERSION" ;;
    protoc-gen-go-grpc) provide protoc-gen-go-grpc "$PROTOC_GEN_GO_GRPC_VERSION" "google.golang.org/grpc/cmd/protoc-gen-go-grpc@$PROTOC_GEN_GO_GRPC_VERSION" install_module "google.golang.org/grpc/cmd/protoc-gen-go-grpc@$PROTOC_GEN_GO_GRPC_VERSION" ;;
    # buf compiles .protos in pure Go, so generating code needs no protoc.
    buf) provide buf "$BUF_VERSION" "github.com/bufbuild/buf@$BUF_VERSION" install_module "github.com/bufbuild/buf/cmd/buf@$BUF_VERSION" ;;
    cluster-api-manager) provide cluster-api-manager "$CLUSTER_API_VERSION" "sigs.k8s.io/cluster-api@$CLUSTER_API_VERSION" build_capi ;;
    kueue-manager) provide kueue-manager "$KUEUE_VERSION" "sigs.k8s.io/kueue@$KUEUE_VERSION" build_kueue ;;
    helm) provide helm "$HELM_VERSION" "helm.sh/helm/v3@$HELM_VERSION" install_module "helm.sh/helm/v3/cmd/helm@$HELM_VERSION" ;;
    prometheus|promtool)
      provide prometheus "$PROMETHEUS_VERSION" "github.com/prometheus/prometheus@$PROMETHEUS_VERSION" build_prometheus
      provide promtool "$PROMETHEUS_VERSION" "github.com/prometheus/prometheus@$PROMETHEUS_VERSION" copy_promtool ;;
    *) echo "hack/tools.sh: unknown tool $1" >&2; return 2 ;;
  esac
}

# The demo compiles kubectl beside its first pods (hack/demo), so it is not
# among the tools the demo waits for; `make up` and the tests add it.
demo_tools=(kube-apiserver etcd kube-scheduler kube-controller-manager kwok kwok-stages.yaml)
generate_tools=(controller-gen buf protoc-gen-go protoc-gen-go-grpc)
# kubemark: the real kubelet with a fake container runtime, for the e2e
# tests that join a node with the flags claimscale renders.
e2e_tools=("${demo_tools[@]}" kubectl kubemark)
# In the order the integration tests first ask for them, the chart's first
# (hack/test.sh builds these beside the tests); prometheus brings promtool
# (one build).
few_test_tools=(helm cluster-api-manager kueue-manager prometheus)
want=()
for arg in "${@:-test}"; do
  case "$arg" in
    demo) want+=("${demo_tools[@]}") ;;
    generate) want+=("${generate_tools[@]}") ;;
    chart) want+=(helm) ;;
    e2e) want+=("${e2e_tools[@]}") ;;
    few-tests) want+=("${few_test_tools[@]}") ;;
    test) want+=("${e2e_tools[@]}" "${generate_tools[@]}" "${few_test_tools[@]}") ;;
    *) want+=("$arg") ;;
  esac
done

# The shared commands asked for are built together first in the
# background; the other tools are independent modules and build beside it,
# two at a time (the go command already runs a build's packages in parallel).
shared=() others=()
for tool in "${want[@]}"; do
  if [[ " ${shared_tools[*]} " == *" $tool "* ]]; then shared+=("$tool"); else others+=("$tool"); fi
done
pids=()
if [ ${#shared[@]} -gt 0 ]; then
  shared_commands "${shared[@]}" & pids+=($!)
fi
failed=0
running=()
for tool in "${others[@]}"; do
  one "$tool" & running+=($!)
  if [ ${#running[@]} -ge 2 ]; then
    wait "${running[0]}" || failed=1
    running=("${running[@]:1}")
  fi
done
for pid in "${running[@]}" "${pids[@]}"; do
  wait "$pid" || failed=1
done
exit $failed
