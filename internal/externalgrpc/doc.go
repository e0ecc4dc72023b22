// Package externalgrpc serves the Cluster Autoscaler's externalgrpc
// CloudProvider protocol over claimscale's NodePools and NodeClaims, so a
// cluster that keeps cluster-autoscaler lets it decide when nodes come and
// go while claimscale still decides how (provider, registration, drain,
// deprovisioning, garbage collection).
//
// A node group is a NodePool with spec.limits.nodes; its target size is the
// number of its claims not being deleted. Growing a group writes NodeClaims
// and returns at once; shrinking it deletes claims, whose termination
// drains and deprovisions the nodes. Every answer is read from the
// controller-runtime cache, never by an API call per request.
//
// This mode never puts machines to sleep: cluster-autoscaler decides, and
// it deletes. A claim whose machine sleeps, or is being put to sleep (left
// from native mode), is no instance of its group and counts in no target
// size: it has no Node, and cluster-autoscaler would time it out as
// unregistered and delete it.
package externalgrpc
