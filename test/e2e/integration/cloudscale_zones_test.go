package integration

import (
	"context"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/internal/testenv"
	"github.com/claimscale/claimscale/pkg/provider/cloudscale"
	"github.com/claimscale/claimscale/pkg/provider/cloudscale/cloudscaletest"
	"github.com/claimscale/claimscale/test/e2e/internal/harness"
)

// zonedCloudscale is a scenario with a cloudscale NodeProvider over lpg1
// and rma1 on the fake API, a pool of one 2-vCPU flavor, and a stand-in
// kubelet that registers every server as a Node labelled with the server's
// zone, as the cloudscale cloud-controller-manager labels them.
type zonedCloudscale struct {
	*harness.Scenario
	api           *cloudscaletest.Server
	capacityClock *clocktesting.FakeClock
}

func newZonedCloudscale(t *testing.T, name string) *zonedCloudscale {
	api := cloudscaletest.NewServer(cloudscaletest.WithToken("cloudscale-api-token"), cloudscaletest.WithServersRunning())
	t.Cleanup(api.Close)
	capacityClock := clocktesting.NewFakeClock(time.Now())
	harness.StartOperator(t, harness.OperatorOptions{CapacityClock: capacityClock})

	s := harness.NewScenario(t, name)
	s.CreateSecret(name+"-credentials", map[string][]byte{
		"token": []byte("cloudscale-api-token"), "apiURL": []byte(api.URL),
	})
	s.G.Expect(env.Client.Create(s.Ctx, &v1alpha1.NodeProvider{
		ObjectMeta: metav1.ObjectMeta{Name: s.Name},
		Spec: v1alpha1.NodeProviderSpec{
			Type:                 v1alpha1.ProviderTypeCloudscale,
			CredentialsSecretRef: &v1alpha1.SecretReference{Name: name + "-credentials", Namespace: harness.ControllerNamespace},
			Cloudscale: &v1alpha1.CloudscaleSettings{
				Zones: []v1alpha1.CloudscaleZone{{Name: "lpg1"}, {Name: "rma1"}},
				Image: "debian-12", VolumeSizeGB: 50,
			},
		},
	})).To(Succeed())
	s.CreatePool(func(pool *v1alpha1.NodePool) {
		pool.Spec.Shapes.Fixed = []v1alpha1.Shape{{Name: "flex-8-2"}}
	})

	ctx, stop := context.WithCancel(context.Background())
	t.Cleanup(stop)
	z := &zonedCloudscale{Scenario: s, api: api, capacityClock: capacityClock}
	go z.runKubelets(ctx)
	return z
}

// runKubelets registers a Node for every server of this cluster, with the
// server's flavor as capacity and its zone as topology labels.
func (z *zonedCloudscale) runKubelets(ctx context.Context) {
	ticker := time.NewTicker(200 * time.Millisecond)
	defer ticker.Stop()
	for {
		for _, srv := range z.api.Servers() {
			if srv.Tags[v1alpha1.TagCluster] != harness.ClusterName {
				continue
			}
			capacity := corev1.ResourceList{
				corev1.ResourceCPU:    *resource.NewQuantity(int64(srv.Flavor.VCPUCount), resource.DecimalSI),
				corev1.ResourceMemory: *resource.NewQuantity(int64(srv.Flavor.MemoryGB)<<30, resource.BinarySI),
				corev1.ResourcePods:   resource.MustParse("110"),
			}
			node := &corev1.Node{
				ObjectMeta: metav1.ObjectMeta{
					Name:        srv.Name,
					Annotations: map[string]string{testenv.KwokNodeAnnotation: "fake"},
					Labels: map[string]string{
						corev1.LabelHostname: srv.Name, "type": "kwok",
						corev1.LabelTopologyZone: srv.Zone.Slug, corev1.LabelTopologyRegion: srv.Zone.Slug[:3],
					},
				},
				Spec:   corev1.NodeSpec{ProviderID: cloudscale.ProviderID(srv.UUID)},
				Status: corev1.NodeStatus{Capacity: capacity, Allocatable: capacity},
			}
			if err := env.Client.Create(ctx, node); err != nil && !apierrors.IsAlreadyExists(err) && ctx.Err() == nil {
				z.T.Logf("registering node %s: %v", srv.Name, err)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
	}
}

// spreadDeployment makes replicas pods of 1200m each (one per 2-vCPU
// node) spread over zones with maxSkew 1, DoNotSchedule.
func (z *zonedCloudscale) spreadDeployment(name string, replicas int32) *appsv1.Deployment {
	return z.CreateDeployment(name, replicas, "1200m", func(d *appsv1.Deployment) {
		d.Spec.Template.Spec.TopologySpreadConstraints = []corev1.TopologySpreadConstraint{{
			MaxSkew: 1, TopologyKey: corev1.LabelTopologyZone, WhenUnsatisfiable: corev1.DoNotSchedule,
			LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
		}}
	})
}

// runningPodsByZone counts an app's running pods by their node's zone.
func (z *zonedCloudscale) runningPodsByZone(app string) map[string]int {
	zoneOf := map[string]string{}
	for _, node := range z.Nodes() {
		zoneOf[node.Name] = node.Labels[corev1.LabelTopologyZone]
	}
	counts := map[string]int{}
	for _, pod := range z.Pods(app) {
		if pod.Status.Phase == corev1.PodRunning && pod.Spec.NodeName != "" && pod.DeletionTimestamp.IsZero() {
			counts[zoneOf[pod.Spec.NodeName]]++
		}
	}
	return counts
}

// serversByZone counts this cluster's servers by zone.
func (z *zonedCloudscale) serversByZone() map[string]int {
	counts := map[string]int{}
	for _, srv := range z.api.Servers() {
		if srv.Tags[v1alpha1.TagCluster] == harness.ClusterName {
			counts[srv.Zone.Slug]++
		}
	}
	return counts
}

// createsIn counts the create requests the API received for zone.
func (z *zonedCloudscale) createsIn(zone string) int {
	n := 0
	for _, r := range z.api.Requests() {
		if r.Method == "POST" && r.Path == "/v1/servers" && strings.Contains(string(r.Body), `"zone":"`+zone+`"`) {
			n++
		}
	}
	return n
}

// capacityEvents are the InsufficientCapacity events on claims.
func capacityEvents(g *WithT) []string {
	var list corev1.EventList
	g.Expect(env.Client.List(context.Background(), &list)).To(Succeed())
	var found []string
	for _, event := range list.Items {
		if event.InvolvedObject.Kind == "NodeClaim" && event.Reason == "InsufficientCapacity" {
			found = append(found, event.Message)
		}
	}
	return found
}

// A pool over two zones: pods spread over zones with maxSkew 1 get servers
// in both, because provisioning considers each zone a place of its own.
func TestCloudscaleZoneSpread(t *testing.T) {
	z := newZonedCloudscale(t, "cloudscale-spread")
	defer z.Cleanup()

	both := &v1alpha1.NodeProvider{
		ObjectMeta: metav1.ObjectMeta{Name: "cloudscale-zone-and-zones"},
		Spec: v1alpha1.NodeProviderSpec{Type: v1alpha1.ProviderTypeCloudscale, Cloudscale: &v1alpha1.CloudscaleSettings{
			Zone: "lpg1", Zones: []v1alpha1.CloudscaleZone{{Name: "rma1"}}, Image: "debian-12",
		}},
	}
	err := env.Client.Create(z.Ctx, both)
	z.G.Expect(apierrors.IsInvalid(err)).To(BeTrue(), "zone and zones together are refused, got %v", err)
	z.G.Expect(err.Error()).To(ContainSubstring("set zones or zone, not both"))

	z.spreadDeployment("spread", 4)
	z.G.Eventually(func() int { return z.RunningPods("spread") }).Should(Equal(4))
	z.G.Expect(z.runningPodsByZone("spread")).To(Equal(map[string]int{"lpg1": 2, "rma1": 2}))
	z.G.Expect(z.serversByZone()).To(Equal(map[string]int{"lpg1": 2, "rma1": 2}))
	for _, claim := range z.Claims() {
		z.G.Expect(claim.Spec.Requirements.NodeSelector).To(ContainElement(And(
			HaveField("Key", corev1.LabelTopologyZone), HaveField("Operator", corev1.NodeSelectorOpIn), HaveField("Values", HaveLen(1)),
		)), "claim %s names its zone", claim.Name)
	}
}

// One zone out of capacity: the pods still run, all in the other zone, the
// zone is not asked again while backed off, and is used again once its
// backoff has passed.
func TestCloudscaleZoneOutOfCapacity(t *testing.T) {
	z := newZonedCloudscale(t, "cloudscale-capacity")
	defer z.Cleanup()
	z.api.InjectFault(cloudscaletest.OutOfCapacity("lpg1", ""))

	deployment := z.spreadDeployment("spread", 2)
	z.G.Eventually(func() int { return z.RunningPods("spread") }).Should(Equal(2))
	z.G.Expect(z.runningPodsByZone("spread")).To(Equal(map[string]int{"rma1": 2}), "every pod in the zone with capacity")
	z.G.Expect(z.serversByZone()).To(Equal(map[string]int{"rma1": 2}))
	triedInLPG1 := z.createsIn("lpg1")
	z.G.Expect(triedInLPG1).To(BeNumerically(">=", 1), "lpg1 was asked and answered out of capacity")
	z.G.Eventually(func() []string { return capacityEvents(z.G) }).Should(ContainElement(ContainSubstring("shape flex-8-2 in zone lpg1 backed off for")))

	// While lpg1 is backed off, another pod needing a node gets one in
	// rma1, and lpg1 is not asked.
	z.Scale(deployment, 3)
	z.G.Eventually(func() int { return z.RunningPods("spread") }).Should(Equal(3))
	z.G.Expect(z.runningPodsByZone("spread")).To(Equal(map[string]int{"rma1": 3}))
	z.G.Expect(z.createsIn("lpg1")).To(Equal(triedInLPG1), "not asked again while backed off")

	// The zone has room again and its backoff passes (30 minutes is the
	// longest there is): new pods, which the spread sends to lpg1, get
	// servers there.
	z.api.ClearFaults()
	z.capacityClock.Step(30*time.Minute + time.Second)
	z.Scale(deployment, 5)
	z.G.Eventually(func() int { return z.RunningPods("spread") }).Should(Equal(5))
	z.G.Expect(z.createsIn("lpg1")).To(BeNumerically(">", triedInLPG1), "lpg1 is retried after its backoff")
	z.G.Expect(z.runningPodsByZone("spread")).To(Equal(map[string]int{"lpg1": 2, "rma1": 3}))
	z.G.Expect(z.serversByZone()).To(Equal(map[string]int{"lpg1": 2, "rma1": 3}))
	z.T.Logf("creates in lpg1: %d while out of capacity, %d in all", triedInLPG1, z.createsIn("lpg1"))
}
