package disruption

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	resourcehelper "k8s.io/component-helpers/resource"

	"github.com/claimscale/claimscale/internal/decisions"
)

// After a scale-up a thousand full nodes become consolidation candidates
// at once. Their pods outgrow the free room of all the others together, so
// one round tells every one of them, without building a snapshot; and
// their refusals say what the simulation would have said.
func TestFullNodesAreToldFromTheirFreeRoomWithoutASimulation(t *testing.T) {
	f := newFixture(c8)
	const nodes = 50
	f.filled(nodes, 10, "800m")
	s, r, _, _ := stableRound(f, newMemory(time.Hour))
	cmd, err := r.decide(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if cmd != nil {
		t.Fatalf("full nodes: decided %s", describe(cmd))
	}
	if s.simulations != 0 || s.sim != nil {
		t.Fatalf("%d simulations (snapshot built: %t); the free room tells", s.simulations, s.sim != nil)
	}
	refused := map[string]string{}
	for _, refusal := range r.refusals {
		refused[refusal.candidate.node.Name] = refusal.record
	}
	if len(refused) != nodes {
		t.Fatalf("%d of %d nodes told in one round: %v", len(refused), nodes, refused)
	}
	for node, record := range refused {
		if record != decisions.NodeReasonNotCheaper {
			t.Errorf("node %s refused as %s, want %s", node, record, decisions.NodeReasonNotCheaper)
		}
	}
}

// Where the free room may hold the pods, the simulation decides: one
// node's pods spread over the room the others have left.
func TestFreeRoomDefersToTheSimulationWhereThePodsMightFit(t *testing.T) {
	f := newFixture(c8)
	f.filled(3, 6, "800m")
	s, r, _, _ := stableRound(f, newMemory(time.Hour))
	cmd, err := r.decide(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if cmd == nil || len(cmd.candidates) != 1 || len(cmd.replacements) != 0 {
		t.Fatalf("want one node deleted, its six pods in the room the other two have; got %v", cmd)
	}
	if s.simulations == 0 {
		t.Fatal("decided without simulating")
	}
}

// The sum of plain containers' requests is the general rule's answer.
func TestRequestsOfAddsUpAsPodRequestsDoes(t *testing.T) {
	container := func(cpu, memory string) corev1.Container {
		return corev1.Container{Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
			corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(memory),
		}}}
	}
	always := corev1.ContainerRestartPolicyAlways
	sidecar := container("100m", "64Mi")
	sidecar.RestartPolicy = &always
	for name, spec := range map[string]corev1.PodSpec{
		"plain":             {Containers: []corev1.Container{container("500m", "1Gi"), container("250m", "512Mi")}},
		"cpu only":          {Containers: []corev1.Container{{Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}}}}},
		"nothing requested": {Containers: []corev1.Container{{}}},
		"init larger":       {InitContainers: []corev1.Container{container("2", "4Gi")}, Containers: []corev1.Container{container("500m", "1Gi")}},
		"sidecar":           {InitContainers: []corev1.Container{sidecar}, Containers: []corev1.Container{container("500m", "1Gi")}},
		"overhead":          {Overhead: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("250m")}, Containers: []corev1.Container{container("500m", "1Gi")}},
	} {
		pod := &corev1.Pod{Spec: spec}
		requests := resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{})
		if got, want := requestsOf(pod), (room{requests.Cpu().MilliValue(), requests.Memory().Value()}); got != want {
			t.Errorf("%s: requestsOf = %+v, want %+v", name, got, want)
		}
	}
}
