#!/usr/bin/env bash
# Generates the Go code of the Cluster Autoscaler's externalgrpc and gRPC
# expander protocols (internal/externalgrpc/protos) from their .protos.
# Every generator is pinned, and protoc's version is written into the
# output, so this refuses any other protoc: the committed code is then byte-for-byte what this script
# makes on any machine, and running it twice changes nothing.
# Usage: hack/proto.sh
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

# Debian's protobuf-compiler (bookworm and trixie ship 3.21.12).
PROTOC_VERSION=3.21.12
PROTO_FILES=(internal/externalgrpc/protos/externalgrpc.proto internal/externalgrpc/protos/expander.proto)
# KEDA's external-scaler protocol, for headroom from an external signal.
PROTO_FILES+=(internal/externalscaler/protos/externalscaler.proto)

if ! command -v protoc >/dev/null; then
  echo "protoc missing: install Debian's protobuf-compiler (apt-get install protobuf-compiler)" >&2
  exit 1
fi
have=$(protoc --version | awk '{print $2}')
if [ "$have" != "$PROTOC_VERSION" ]; then
  echo "protoc $have found, $PROTOC_VERSION wanted: its version is written into the generated code" >&2
  exit 1
fi
# protoc-gen-go and protoc-gen-go-grpc at the versions pinned there.
hack/tools.sh protoc-gen-go protoc-gen-go-grpc

protoc \
  --plugin=protoc-gen-go="$root/bin/protoc-gen-go" \
  --plugin=protoc-gen-go-grpc="$root/bin/protoc-gen-go-grpc" \
  --proto_path=. \
  --go_out=. --go_opt=paths=source_relative \
  --go-grpc_out=. --go-grpc_opt=paths=source_relative \
  "${PROTO_FILES[@]}"
