#!/usr/bin/env bash
# Generates the Go code of every protocol claimscale speaks from its .proto:
# the Cluster Autoscaler's externalgrpc and gRPC expander protocols
# (internal/externalgrpc/protos), KEDA's external-scaler protocol
# (internal/externalscaler/protos) and claimscale's own provider plugin
# protocol (pkg/provider/plugin/pluginpb). buf compiles the protos in pure
# Go and runs the pinned protoc-gen-go and protoc-gen-go-grpc as local
# plugins, all built from pinned Go modules by hack/tools.sh: no protoc from
# the system, and the committed code is byte-for-byte what this script makes
# on any machine.
# Usage: hack/proto.sh
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

PROTO_FILES=(
  internal/externalgrpc/protos/externalgrpc.proto
  internal/externalgrpc/protos/expander.proto
  # KEDA's external-scaler protocol, for headroom from an external signal.
  internal/externalscaler/protos/externalscaler.proto
  pkg/provider/plugin/pluginpb/provider.proto
)

hack/tools.sh buf protoc-gen-go protoc-gen-go-grpc

paths=()
for f in "${PROTO_FILES[@]}"; do paths+=(--path "$f"); done
bin/buf generate --template hack/buf.gen.yaml "${paths[@]}" .
