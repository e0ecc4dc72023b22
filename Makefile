# claimscale: `make demo` runs the demo, `make test` runs every test.
# Everything this file needs is built from pinned Go modules (hack/tools.sh)
# into bin/, cached per machine under ~/.cache/claimscale.

SHELL := /usr/bin/env bash -o pipefail
.SHELLFLAGS := -ec
.DEFAULT_GOAL := build

BIN := $(CURDIR)/bin
export KUBEBUILDER_ASSETS := $(BIN)
export PATH := $(BIN):$(PATH)
# The checksum database does not know every module the proxy serves here;
# go.sum pins them all the same.
export GONOSUMDB := github.com/cloudscale-ch/*

VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT ?= $(shell git rev-parse --short HEAD 2>/dev/null || echo unknown)
LDFLAGS := -X github.com/claimscale/claimscale/internal/version.Version=$(VERSION) -X github.com/claimscale/claimscale/internal/version.Commit=$(COMMIT)

GO_TEST_FLAGS ?= -count=1
# The compiler and linker collect garbage less often with a larger GOGC:
# on a cold machine, where compiling is most of the time, GOGC=400 is a
# fifth faster at a few hundred MB more per compile. GOGC is no part of
# the build cache's keys, so what is compiled this way is what any other
# build finds. Only the builds get it: the test binaries run with the
# environment's own GOGC (go test -exec below), as do the demo's processes.
BUILD_GOGC ?= 400
# Packages that need no control plane.

.PHONY: help
help: ## Show the targets.
	@grep -E '^[a-zA-Z_-]+:.*?## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*?## "}; {printf "  %-12s %s\n", $$1, $$2}'

.PHONY: tools
tools: ## Build every tool the tests use into bin/ (once per machine).
	hack/tools.sh test

# Each target builds only the tools it uses: the demo and `make up` need the
# control plane and kwok, not the generators, helm, Prometheus or Cluster API.
# The demo compiles kubectl while its first pods start; `make up` leaves a
# cluster for kubectl, so it builds it first.
.PHONY: tools-demo
tools-demo: ## Build the local control plane's binaries (kube-*, etcd, kwok) into bin/.
	hack/tools.sh demo

bin/controller-gen:
	hack/tools.sh controller-gen

.PHONY: generate
generate: bin/controller-gen ## Generate deepcopy code.
	$(BIN)/controller-gen object:headerFile=hack/boilerplate.go.txt paths=./api/...

# The CRDs of the autoscaling SIG's kinds claimscale serves
# (ProvisioningRequest, CapacityBuffer) go to config/crd/autoscaling, not
# into the chart: cluster-autoscaler or Kueue may have installed them.
.PHONY: manifests
manifests: bin/controller-gen ## Generate CRDs and RBAC, and copy them into the Helm chart.
	$(BIN)/controller-gen crd paths=./api/v1alpha1/... output:crd:artifacts:config=config/crd/bases
	$(BIN)/controller-gen crd paths=./api/autoscaling/... output:crd:artifacts:config=config/crd/autoscaling
	go run ./hack/crdbounds config/crd/bases/*.yaml
	$(BIN)/controller-gen rbac:roleName=claimscale paths=./internal/operator/... output:rbac:artifacts:config=config/rbac
	mkdir -p charts/claimscale/crds charts/claimscale/files
	cp config/crd/bases/*.yaml charts/claimscale/crds/
	$(BIN)/controller-gen rbac:roleName=claimscale-simulated paths=./pkg/provider/simulated/... output:rbac:artifacts:config=config/rbac/simulated
	cp config/rbac/role.yaml charts/claimscale/files/role.yaml
	cp config/rbac/simulated/role.yaml charts/claimscale/files/role-simulated.yaml
	$(BIN)/controller-gen rbac:roleName=claimscale-clusterapi paths=./pkg/provider/clusterapi/... output:rbac:artifacts:config=config/rbac/clusterapi
	cp config/rbac/clusterapi/role.yaml charts/claimscale/files/role-clusterapi.yaml
	$(BIN)/controller-gen rbac:roleName=claimscale-redfish paths=./pkg/provider/redfish/... output:rbac:artifacts:config=config/rbac/redfish
	cp config/rbac/redfish/role.yaml charts/claimscale/files/role-redfish.yaml

.PHONY: proto
proto: ## Generate the gRPC protocols' Go code with buf (built from a pinned module, no protoc).
	hack/proto.sh

.PHONY: dashboards
dashboards: ## Generate the Grafana dashboards (Grafana Foundation SDK) into the chart.
	mkdir -p charts/claimscale/dashboards
	go run ./hack/dashboards charts/claimscale/dashboards

GENERATED := api config charts internal/externalgrpc/protos internal/externalscaler/protos pkg/provider/plugin/pluginpb

.PHONY: verify
verify: verify-generated vet ## Fail when generated files are stale or gofmt/go vet complain.

.PHONY: verify-generated
verify-generated: generate manifests proto dashboards ## Fail when generated files are stale or gofmt complains.
	@if [ -n "$$(git status --porcelain -- $(GENERATED))" ]; then \
		echo "generated files are out of date; run 'make generate manifests proto dashboards' and commit:"; \
		git status --porcelain -- $(GENERATED); git --no-pager diff -- $(GENERATED) | head -50; exit 1; fi
	@bad=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$bad" ]; then echo "gofmt needed: $$bad"; exit 1; fi

.PHONY: vet
vet: ## go vet every package.
	GOGC=$(BUILD_GOGC) go vet ./...

.PHONY: build
build: build-demo ## Build bin/claimscale, the kubectl plugin bin/kubectl-claimscale, the reference provider plugin bin/claimscale-provider-example and the demo program bin/demo.
	GOGC=$(BUILD_GOGC) go build -ldflags "$(LDFLAGS)" -o $(BIN)/kubectl-claimscale ./cmd/kubectl-claimscale
	GOGC=$(BUILD_GOGC) go build -o $(BIN)/claimscale-provider-example ./cmd/claimscale-provider-example

# The controller and the demo program (hack/demo, also `make up` and `make
# down`) in one go build, so the two link at the same time; the demo and
# make scale need no more, and a first-time demo does not wait for the
# plugin binaries.
.PHONY: build-demo
build-demo: ## Build bin/claimscale and the demo program bin/demo.
	GOGC=$(BUILD_GOGC) go build -ldflags "$(LDFLAGS)" -o $(BIN)/ ./cmd/claimscale ./hack/demo

.PHONY: lint-chart
lint-chart: ## helm lint the chart with its default and externalgrpc values.
	hack/tools.sh chart
	$(BIN)/helm lint --strict charts/claimscale --set clusterName=ci
	$(BIN)/helm lint --strict charts/claimscale -f charts/claimscale/values-externalgrpc.yaml
	$(BIN)/helm lint --strict charts/claimscale --set clusterName=ci --set metrics.serviceMonitor.enabled=true --set metrics.prometheusRule.enabled=true --set metrics.dashboards.enabled=true

# hack/test.sh says in which order: the control plane's build first, the
# tools only a few tests use beside the tests.
.PHONY: test
test: ## Run every test: generated code, chart lint, unit, envtest and end-to-end.
	GO_TEST_FLAGS='$(GO_TEST_FLAGS)' BUILD_GOGC=$(BUILD_GOGC) hack/test.sh

.PHONY: bench
bench: ## Run the benchmarks.
	go test -run '^$$' -bench . -benchmem -timeout 30m ./internal/...

.PHONY: scale
scale: tools-demo build-demo ## Measure claimscale at scale on a local control plane (SCALE_FLAGS="-pods 10000 -deployments 10").
	go run ./hack/scale $(SCALE_FLAGS)

.PHONY: demo
demo: tools-demo build-demo ## Run the demo on a local control plane.
	$(BIN)/demo

# `make up` keeps the demo's cluster running for trying things by hand; its
# kubeconfig, process ids and logs are in .up/.
UP_DIR := $(CURDIR)/.up

.PHONY: up
up: tools-demo build ## Start a local control plane with claimscale (simulated provider) and leave it running.
	hack/tools.sh kubectl
	$(BIN)/demo -up $(UP_DIR)

.PHONY: down
down: build-demo ## Stop everything `make up` started.
	$(BIN)/demo -down $(UP_DIR)
