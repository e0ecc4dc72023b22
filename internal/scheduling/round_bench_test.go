package scheduling

import (
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/claimscale/claimscale/api/v1alpha1"
)

// fullCluster is `make scale`'s cluster once it is up: n nodes of 8 cpu /
// 32Gi, each running ten pods of 800m / 1Gi from ten Deployments.
func fullCluster(n int) Cluster {
	c := Cluster{Pools: []Pool{nodePool("default", []Shape{shape("c8", "8", "32Gi", 8)})}}
	zs := []string{"zone-a", "zone-b"}
	for i := range n {
		name := fmt.Sprintf("node-%04d", i)
		c.Nodes = append(c.Nodes, node(name, "8", "32Gi", map[string]string{
			corev1.LabelTopologyZone: zs[i%2], v1alpha1.LabelNodePool: "default", corev1.LabelInstanceTypeStable: "c8",
		}))
	}
	for d := range 10 {
		app := fmt.Sprintf("scale-%02d", d)
		for i, p := range pods(n, app, "800m", "1Gi") {
			onNode(fmt.Sprintf("node-%04d", i))(p)
			c.Pods = append(c.Pods, p)
		}
	}
	return c
}

// A provisioning round on a cluster of 1,000 full nodes for a batch of
// ten new pods: what the controller spends on every batch in a large
// cluster. The target is 200 ms of CPU (cpu-s/op).
func BenchmarkRoundOn1000FullNodes(b *testing.B) {
	benchmarkSolve(b, fullCluster(1000), pods(10, "late", "800m", "1Gi"))
}
