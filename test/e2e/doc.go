// Package e2e holds claimscale's end-to-end tests: claimscale on a local
// control plane (a real kube-apiserver, etcd, kube-controller-manager,
// kube-scheduler and kwok), with the controllers in-process and the
// simulated provider, so pods really bind to the nodes claimscale makes and
// really become Running.
//
// The scenarios are split into packages so that `go test ./...` runs them
// at the same time (it runs GOMAXPROCS packages at once; CI has 2 cores).
// Each package has its own TestMain and its own control plane
// (harness.Main); within a package the scenarios run one after another,
// since each starts its own controllers on the shared control plane.
//
//   - autoscaling: what the controllers do with pods and nodes on the
//     simulated provider: scale up and down, booting, disruption and
//     consolidation, budgets, warm capacity (headroom, schedules), repair,
//     bad input, scale; machines that sleep instead of being deleted
//     (sleep_test.go); Karpenter's diverse mix binding with the real
//     scheduler on the nodes of one round (fidelity_test.go); and the
//     autoscaling SIG's kinds: ProvisioningRequests of both classes
//     (requests_test.go) and CapacityBuffers (buffers_test.go).
//   - integration: claimscale with what is around it: the real providers'
//     APIs (Proxmox, cloudscale), provider plugins, Cluster API, pools
//     isolated from each other's failing providers, KEDA's external scaler,
//     Kueue admitting Jobs through ProvisioningRequests (kueue_test.go),
//     nodes that
//     join (bootstrap tokens, the hollow kubelet), the chart and kustomize,
//     metrics and Prometheus, cluster-autoscaler's externalgrpc, and the
//     kubectl plugin (why, simulate, get) with users' roles.
//   - internal/harness: what the scenarios share: the control plane, the
//     in-process operator (StartOperator), the Scenario (namespace,
//     provider and pool named after the test) and the helpers used by more
//     than one file.
//
// A new scenario goes into the package its subject names. The packages are
// kept about equal in time (CONTRIBUTING.md lists each one's): when one
// grows past the other by more than a few minutes, move whole files to the
// other, and when both grow past the budget, add a package (a directory
// with a main_test.go like the others') rather than a control plane per
// test. A helper used by two files goes into internal/harness, so a file
// moves with nothing but its package clause changed. Files that read
// testdata/ by relative path (badinput_test.go) take their testdata with
// them.
package e2e
