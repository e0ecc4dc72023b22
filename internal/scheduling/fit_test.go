package scheduling

import (
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/noderesources"
)

// The simple path fills a node by arithmetic instead of asking
// NodeResourcesFit once per pod; both must agree on how many pods fit.
func TestFitCountAgreesWithNodeResourcesFit(t *testing.T) {
	nodes := []*corev1.Node{
		node("n", "4", "16Gi", nil),
		node("n", "1", "1Gi", nil),
		node("n", "16", "2Gi", nil),
	}
	requests := [][2]string{{"100m", "128Mi"}, {"1500m", "1Gi"}, {"0", "3Gi"}, {"250m", "0"}, {"0", "0"}, {"3", "100Mi"}}
	for _, n := range nodes {
		for _, used := range []int{0, 3} {
			for _, req := range requests {
				t.Run(fmt.Sprintf("%s-%s/%d-used/%s-%s", n.Status.Allocatable.Cpu(), n.Status.Allocatable.Memory(), used, req[0], req[1]), func(t *testing.T) {
					ni := framework.NewNodeInfo()
					ni.SetNode(n)
					for i := 0; i < used; i++ {
						ni.AddPod(pod(fmt.Sprintf("old-%d", i), "100m", "100Mi", onNode("n")))
					}
					cls, err := newPodClass(0, pod("new", req[0], req[1]))
					if err != nil {
						t.Fatal(err)
					}
					free := vecOf(ni.GetAllocatable()).sub(vecOf(ni.GetRequested()))
					k := fitCount(free, int64(ni.GetAllocatable().GetAllowedPodNumber()-len(ni.GetPods())), cls.req)
					for i := 0; i < k; i++ {
						p := pod(fmt.Sprintf("new-%d", i), req[0], req[1])
						if short := noderesources.Fits(p, ni, nil, noderesources.ResourceRequestsOptions{}); len(short) > 0 {
							t.Fatalf("arithmetic says %d fit, but pod %d does not: %v", k, i, short[0].Reason)
						}
						ni.AddPod(p)
					}
					if short := noderesources.Fits(pod("one-more", req[0], req[1]), ni, nil, noderesources.ResourceRequestsOptions{}); len(short) == 0 {
						t.Fatalf("arithmetic says %d fit, but one more fits too", k)
					}
				})
			}
		}
	}
}

func TestEquivalenceClasses(t *testing.T) {
	base := func(opts ...podOpt) *corev1.Pod {
		return pod("p", "1", "1Gi", append([]podOpt{owner("web"), label("app", "web")}, opts...)...)
	}
	tests := []struct {
		name string
		a, b *corev1.Pod
		same bool
	}{
		{"replicas of one owner are one class", base(), pod("q", "1", "1Gi", owner("web"), label("app", "web")), true},
		{"a different request is another class", base(), base(func(p *corev1.Pod) {
			p.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU] = q("2")
		}), false},
		{"a different label is another class", base(), base(label("track", "canary")), false},
		{"a toleration makes another class", base(), base(tolerate("gpu")), false},
		{"a node selector makes another class", base(), base(nodeSelector("disk", "ssd")), false},
		{"a host port makes another class", base(), base(hostPort(80)), false},
		{"another owner is another class", base(), pod("q", "1", "1Gi", owner("api"), label("app", "web")), false},
		{"the same request written differently is the same class", base(), base(func(p *corev1.Pod) {
			p.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU] = q("1000m")
		}), true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := newClassifier()
			ca, err := c.classify(tc.a)
			if err != nil {
				t.Fatal(err)
			}
			cb, err := c.classify(tc.b)
			if err != nil {
				t.Fatal(err)
			}
			if (ca == cb) != tc.same {
				t.Errorf("same class = %v, want %v", ca == cb, tc.same)
			}
		})
	}
}
