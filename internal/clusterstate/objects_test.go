package clusterstate

import (
	"context"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/claimscale/claimscale/internal/scheduling"
	"github.com/claimscale/claimscale/internal/testenv"
)

var env *testenv.Environment

func TestMain(m *testing.M) {
	log.SetLogger(logr.Discard())
	testenv.RunMain(m, testenv.Options{}, &env, nil)
}

// The Existing the informers' handlers keep follows pods as they are
// bound, finish and are deleted, as a decision made on it shows: a
// pending pod fits on the node only while the bound pod is not there.
func TestTheKeptNodesFollowTheInformers(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	informers, err := cache.New(env.Config, cache.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	objects, err := NewObjects(ctx, informers)
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = informers.Start(ctx) }()
	if !informers.WaitForCacheSync(ctx) {
		t.Fatal("the cache did not sync")
	}

	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "kept", Labels: map[string]string{corev1.LabelHostname: "kept"}},
	}
	must(t, env.Client.Create(ctx, node))
	node.Status.Allocatable = corev1.ResourceList{
		corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("4Gi"), corev1.ResourcePods: resource.MustParse("10"),
	}
	node.Status.Capacity = node.Status.Allocatable
	must(t, env.Client.Status().Update(ctx, node))
	bound := testPod("bound", "1500m")
	bound.Spec.NodeName = node.Name
	must(t, env.Client.Create(ctx, bound))

	// Whether a pod of 1 cpu fits next to what the Existing counts on the
	// node; the cluster is given no pods, so only the Existing can count
	// the bound one.
	fits := func() bool {
		t.Helper()
		cluster := scheduling.Cluster{Nodes: objects.Nodes(), Existing: objects.Existing()}
		result, err := scheduling.Solve(ctx, scheduling.Input{Cluster: cluster, Pending: []*corev1.Pod{testPod("pending", "1")}})
		if err != nil {
			t.Fatal(err)
		}
		return len(result.Placements) == 1
	}
	eventually(t, "the bound pod counted on the node", func() bool { return !fits() })

	bound.Status.Phase = corev1.PodSucceeded
	must(t, env.Client.Status().Update(ctx, bound))
	eventually(t, "the finished pod no longer counted", fits)

	again := testPod("again", "1500m")
	again.Spec.NodeName = node.Name
	must(t, env.Client.Create(ctx, again))
	eventually(t, "a second bound pod counted", func() bool { return !fits() })
	must(t, env.Client.Delete(ctx, again, client.GracePeriodSeconds(0)))
	eventually(t, "the deleted pod no longer counted", fits)
}

func testPod(name, cpu string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "app", Image: "app",
			Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu)}},
		}}},
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func eventually(t *testing.T, what string, condition func() bool) {
	t.Helper()
	gomega.NewWithT(t).Eventually(condition).WithTimeout(20*time.Second).WithPolling(50*time.Millisecond).Should(gomega.BeTrue(), what)
}
