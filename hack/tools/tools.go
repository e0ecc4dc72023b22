//go:build tools

// Package tools pins the control-plane binaries hack/tools.sh builds: the
// Kubernetes commands, and etcd and kwok at versions whose dependencies
// agree with Kubernetes' own (etcd at the release of the client
// kube-apiserver uses), so one `go build` compiles their shared packages
// (client-go, grpc, protobuf, etcd's client) once.
package tools

import (
	_ "go.etcd.io/etcd/server/v3"
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
	_ "k8s.io/kubernetes/cmd/kubemark"
	_ "sigs.k8s.io/kwok/cmd/kwok"
)
