// Package protos is the generated Go code of the Cluster Autoscaler's
// externalgrpc protocol (externalgrpc.proto beside it; hack/proto.sh
// regenerates it).
package protos
