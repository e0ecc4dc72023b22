// Package protos is the generated Go code of the Cluster Autoscaler's
// externalgrpc cloud provider protocol (externalgrpc.proto) and of its gRPC
// expander protocol (expander.proto); hack/proto.sh regenerates both.
package protos
