package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/internal/operator"
	"github.com/claimscale/claimscale/internal/testenv"
	"github.com/claimscale/claimscale/pkg/provider/redfish"
	"github.com/claimscale/claimscale/pkg/provider/redfish/redfishtest"
	"github.com/claimscale/claimscale/test/e2e/internal/harness"
)

// metalServer is one server of the rack: its BMC and what it boots into.
type metalServer struct {
	name, shape string
	cpu, memory string
	bmc         *redfishtest.BMC
}

func (m metalServer) system() redfishtest.System { return m.bmc.System("1") }

// bootServers plays the servers' operating systems: a server its BMC
// reports On boots and its kubelet registers a Node as a bare-metal
// kubelet does, named by its hostname, without a providerID (no cloud
// controller sets one), reporting the SMBIOS UUID; a server that is Off
// has no kubelet, and its Node, if something left one, is removed.
func bootServers(ctx context.Context, t *testing.T, servers []metalServer) {
	go func() {
		ticker := time.NewTicker(100 * time.Millisecond)
		defer ticker.Stop()
		for {
			for _, server := range servers {
				system := server.system()
				node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: server.name}}
				if system.PowerState != redfishtest.On {
					if err := env.Client.Get(ctx, client.ObjectKeyFromObject(node), node); err == nil && node.Spec.ProviderID == "" {
						_ = env.Client.Delete(ctx, node)
					}
					continue
				}
				allocatable := corev1.ResourceList{
					corev1.ResourceCPU: resource.MustParse(server.cpu), corev1.ResourceMemory: resource.MustParse(server.memory),
					corev1.ResourcePods: resource.MustParse("110"),
				}
				node = &corev1.Node{
					ObjectMeta: metav1.ObjectMeta{
						Name:        server.name,
						Annotations: map[string]string{testenv.KwokNodeAnnotation: "fake"},
						Labels:      map[string]string{corev1.LabelHostname: server.name, "type": "kwok"},
					},
					Status: corev1.NodeStatus{
						Capacity: allocatable, Allocatable: allocatable,
						NodeInfo: corev1.NodeSystemInfo{SystemUUID: strings.ToUpper(system.UUID)},
					},
				}
				if err := env.Client.Create(ctx, node); err != nil && !apierrors.IsAlreadyExists(err) && ctx.Err() == nil {
					t.Logf("registering node %s: %v", server.name, err)
				}
			}
			select {
			case <-ctx.Done():
				return
			case <-ticker.C:
			}
		}
	}()
}

// A rack of four servers in two shapes behind a redfish NodeProvider, one
// of them already on for someone else: pending pods power on exactly the
// servers the packer chose, their Nodes register by system UUID, the pods
// run; a burst beyond the cap never has more servers on than the cap; at
// zero every server claimscale powered on is off again, and the one that
// was on without a claim is on still, never touched, and reported.
func TestRedfishPowersTheChosenServersOnAndOff(t *testing.T) {
	harness.StartOperator(t, harness.OperatorOptions{Registry: operator.DefaultRegistry(env.Client)})
	s := harness.NewScenario(t, "redfish")
	defer s.Cleanup()

	const user, password = "claimscale", "bmc-e2e-password"
	var servers []metalServer
	for i, spec := range []struct{ shape, cpu, memory string }{{"small", "4", "8Gi"}, {"small", "4", "8Gi"}, {"large", "8", "16Gi"}, {"large", "8", "16Gi"}} {
		cpus := map[string]int{"small": 4, "large": 8}[spec.shape]
		bmc := redfishtest.New(user, password, redfishtest.System{
			ID: "1", UUID: fmt.Sprintf("4c4c4544-0042-3510-8052-b7c04f4d%04d", i), CPUs: cpus, MemoryGiB: float64(2 * cpus),
		})
		defer bmc.Close()
		servers = append(servers, metalServer{name: fmt.Sprintf("redfish-%s-%d", spec.shape, i), shape: spec.shape, cpu: spec.cpu, memory: spec.memory, bmc: bmc})
	}
	someones := servers[0]
	someones.bmc.SetPower("1", redfishtest.On)

	s.CreateSecret("redfish-bmc", map[string][]byte{"username": []byte(user), "password": []byte(password)})
	inventory := make([]v1alpha1.RedfishServer, 0, len(servers))
	for _, server := range servers {
		inventory = append(inventory, v1alpha1.RedfishServer{Name: server.name, Endpoint: server.bmc.URL(), Shape: server.shape, Zone: "rack-1"})
	}
	s.G.Expect(env.Client.Create(s.Ctx, &v1alpha1.NodeProvider{
		ObjectMeta: metav1.ObjectMeta{Name: s.Name},
		Spec: v1alpha1.NodeProviderSpec{
			Type:                 v1alpha1.ProviderTypeRedfish,
			CredentialsSecretRef: &v1alpha1.SecretReference{Name: "redfish-bmc", Namespace: harness.ControllerNamespace},
			Redfish: &v1alpha1.RedfishSettings{
				Servers: inventory, InsecureSkipTLSVerify: true, MaxPoweredOn: harness.Ptr(int32(2)),
				Boot: &v1alpha1.RedfishBoot{Source: v1alpha1.RedfishBootPxe},
			},
		},
	})).To(Succeed())
	s.CreatePool(func(pool *v1alpha1.NodePool) {
		pool.Spec.Shapes.Fixed = []v1alpha1.Shape{
			{Name: "small", CPU: harness.Qty("4"), Memory: harness.Qty("8Gi"), Price: "0.10"},
			{Name: "large", CPU: harness.Qty("8"), Memory: harness.Qty("16Gi"), Price: "0.15"},
		}
	})
	ctx, stopServers := context.WithCancel(context.Background())
	defer stopServers()
	bootServers(ctx, t, servers)

	poweredOnByUs := func() []string {
		var on []string
		for _, server := range servers[1:] {
			if len(server.system().Resets) > 0 && server.system().PowerState != redfishtest.Off {
				on = append(on, server.name)
			}
		}
		return on
	}
	// 3 pods of 3 cpu: a large server holds two, a small one one.
	deployment := s.CreateDeployment("on-metal", 3, "3", nil)
	s.G.Eventually(func() int { return s.RunningPods("on-metal") }).Should(Equal(3))
	claims := s.Claims()
	var chosen []string
	for _, claim := range claims {
		s.G.Expect(claim.Status.ProviderID).To(HavePrefix(v1alpha1.ProviderIDPrefixRedfish))
		s.G.Expect(claim.Status.NodeName).NotTo(BeEmpty())
		node := &corev1.Node{}
		s.G.Expect(env.Client.Get(s.Ctx, client.ObjectKey{Name: claim.Status.NodeName}, node)).To(Succeed())
		s.G.Expect(node.Spec.ProviderID).To(Equal(claim.Status.ProviderID), "registration wrote the providerID of the server whose UUID the Node reports")
		chosen = append(chosen, claim.Status.NodeName)
	}
	s.G.Expect(poweredOnByUs()).To(ConsistOf(chosen), "exactly the servers of the claims were powered on")
	for _, name := range poweredOnByUs() {
		for _, server := range servers {
			if server.name == name {
				s.G.Expect(server.system().BootedFrom).To(Equal("Pxe"), "server %s booted once from the network", name)
			}
		}
	}
	s.G.Expect(someones.system().Resets).To(BeEmpty(), "the server on without a claim is never touched")

	// A burst: 6 more pods need more servers than the cap allows.
	s.Scale(deployment, 9)
	s.G.Consistently(func() int { return len(poweredOnByUs()) }, 5*time.Second, 100*time.Millisecond).Should(BeNumerically("<=", 2),
		"never more servers on for claims than maxPoweredOn")

	// The pods left pending are told why, naming what holds the servers.
	s.G.Eventually(func() []string {
		var notes []string
		for _, pod := range s.Pods("on-metal") {
			if pod.Spec.NodeName == "" {
				notes = append(notes, harness.EventsOf(s.G, "Pod", pod.Name)...)
			}
		}
		return notes
	}).Should(ContainElement(And(ContainSubstring("no machine of shapes"), ContainSubstring("its maxPoweredOn"))))

	// The NodeProvider reports the server it leaves alone.
	s.G.Eventually(func() string {
		np := &v1alpha1.NodeProvider{}
		if err := env.Client.Get(s.Ctx, client.ObjectKey{Name: s.Name}, np); err != nil {
			return err.Error()
		}
		// Its status is rechecked every minute; a touch asks now.
		patch := client.MergeFrom(np.DeepCopy())
		np.Annotations = map[string]string{"e2e/touched": time.Now().Format(time.RFC3339Nano)}
		_ = env.Client.Patch(s.Ctx, np, patch)
		if c := meta.FindStatusCondition(np.Status.Conditions, v1alpha1.ConditionDegraded); c != nil {
			return c.Message
		}
		return ""
	}, 30*time.Second, time.Second).Should(And(ContainSubstring("is on without a claim"), ContainSubstring(someones.name)))

	s.Scale(deployment, 0)
	s.G.Eventually(func() int { return len(s.Claims()) }).Should(BeZero())
	s.G.Eventually(poweredOnByUs).Should(BeEmpty(), "every server claimscale powered on is off again")
	var leases corev1.ConfigMapList
	s.G.Expect(env.Client.List(s.Ctx, &leases, client.InNamespace(harness.ControllerNamespace), client.MatchingLabels{redfish.LabelLease: s.Name})).To(Succeed())
	s.G.Expect(leases.Items).To(BeEmpty())
	s.G.Expect(someones.system().PowerState).To(Equal(redfishtest.On))
	s.G.Expect(someones.system().Resets).To(BeEmpty())
}
