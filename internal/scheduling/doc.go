// Package scheduling decides where pending pods go and which new nodes they
// need, the way the kube-scheduler would decide it, without talking to a
// cluster: it takes objects (pools, nodes, pods, in-flight claims,
// DaemonSets) and returns a decision.
//
// Fit is decided by the kube-scheduler's own Filter plugins run over an
// in-memory, copy-on-write Snapshot. Template nodes (TemplateNode) are what
// a pool's machine would register as, with the pods of every DaemonSet that
// would run there. Simulator.Solve packs pending pods onto existing,
// in-flight and new nodes; Simulator.SimulateRemoval tells the disruption
// controller whether a node's pods fit elsewhere. Identical pods are handled
// as one equivalence class, which is where the speed comes from.
package scheduling
