package integration

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/internal/operator"
	"github.com/claimscale/claimscale/pkg/provider/cloudscale"
	"github.com/claimscale/claimscale/pkg/provider/cloudscale/cloudscaletest"
	"github.com/claimscale/claimscale/pkg/provider/proxmox"
	"github.com/claimscale/claimscale/pkg/provider/proxmox/proxmoxtest"
	"github.com/claimscale/claimscale/test/e2e/internal/harness"
)

// The whole lifecycle on a Proxmox VE API: pending pods → claim → VM cloned
// from the template and started → a Node registers → Ready → pods Running
// → scale to zero → the VM is destroyed.
func TestProxmoxLifecycle(t *testing.T) {
	server := proxmoxtest.NewServer()
	defer server.Close()
	server.SetAPIToken("claimscale@pve!autoscaler", "token-secret-value")
	server.AddTemplate(9000, "pve", "debian-template")

	registry := operator.DefaultRegistry(env.Client)
	registry.Register(v1alpha1.ProviderTypeProxmox, proxmox.NewFactory(proxmox.Tuning{TaskPollInterval: 20 * time.Millisecond}))
	harness.StartOperator(t, harness.OperatorOptions{Registry: registry})

	s := harness.NewScenario(t, "proxmox")
	defer s.Cleanup()
	s.CreateSecret("proxmox-credentials", map[string][]byte{
		proxmox.SecretKeyTokenID: []byte("claimscale@pve!autoscaler"), proxmox.SecretKeyTokenSecret: []byte("token-secret-value"),
		proxmox.SecretKeyCA: server.CACertPEM(),
	})
	s.G.Expect(env.Client.Create(s.Ctx, &v1alpha1.NodeProvider{
		ObjectMeta: metav1.ObjectMeta{Name: s.Name},
		Spec: v1alpha1.NodeProviderSpec{
			Type:                 v1alpha1.ProviderTypeProxmox,
			CredentialsSecretRef: &v1alpha1.SecretReference{Name: "proxmox-credentials", Namespace: harness.ControllerNamespace},
			Proxmox: &v1alpha1.ProxmoxSettings{
				Endpoint:          server.Endpoint(),
				VMIDRange:         v1alpha1.VMIDRange{Lower: 5000, Upper: 5099},
				Clone:             &v1alpha1.ProxmoxClone{TemplateID: 9000, Full: harness.Ptr(true)},
				NetworkInterfaces: []v1alpha1.ProxmoxNetworkInterface{{Model: "virtio", Bridge: "vmbr0"}},
			},
		},
	})).To(Succeed())
	s.CreatePool(nil)

	ctx, stopKubelets := context.WithCancel(context.Background())
	defer stopKubelets()
	ourVMs := func() []proxmoxtest.VM {
		var vms []proxmoxtest.VM
		for _, vm := range server.VMs() {
			if !vm.Template && strings.Contains(vm.Config["tags"], "claimscale-cluster."+harness.ClusterName) {
				vms = append(vms, vm)
			}
		}
		return vms
	}
	harness.RunKubelets(ctx, t, func() []harness.Machine {
		var running []harness.Machine
		for _, vm := range ourVMs() {
			if vm.Status == "running" && vm.Name != "" && vm.Lock == "" {
				running = append(running, harness.Machine{Name: vm.Name, ProviderID: proxmox.ProviderID(harness.ClusterName, vm.VMID)})
			}
		}
		return running
	})

	deployment := s.CreateDeployment("on-proxmox", 2, "1", nil)
	s.G.Eventually(func() int { return s.RunningPods("on-proxmox") }).Should(Equal(2))
	s.G.Eventually(s.ReadyClaims).Should(Equal(1))
	claim := s.Claims()[0]
	s.G.Expect(claim.Status.ProviderID).To(HavePrefix("proxmox://" + harness.ClusterName + "/"))
	vms := ourVMs()
	s.G.Expect(vms).To(HaveLen(1))
	s.G.Expect(vms[0].Name).To(Equal(claim.Name))
	s.G.Expect(vms[0].VMID).To(BeNumerically(">=", 5000))
	s.G.Expect(claim.Status.ProviderID).To(HaveSuffix("/" + strconv.Itoa(vms[0].VMID)))

	s.Scale(deployment, 0)
	s.G.Eventually(func() int { return len(s.Claims()) + len(s.Nodes()) }).Should(BeZero())
	s.G.Eventually(ourVMs).Should(BeEmpty(), "the VM is destroyed on the Proxmox API")
	_, templateKept := server.VMByName("debian-template")
	s.G.Expect(templateKept).To(BeTrue(), "the template, which is not ours, is untouched")
}

// The whole lifecycle on the cloudscale API: pending pods → claim → server
// created with our tags → a Node registers → Ready → pods Running → scale
// to zero → the server is deleted.
func TestCloudscaleLifecycle(t *testing.T) {
	server := cloudscaletest.NewServer(cloudscaletest.WithToken("cloudscale-api-token"), cloudscaletest.WithServersRunning())
	defer server.Close()
	harness.StartOperator(t, harness.OperatorOptions{Registry: operator.DefaultRegistry(env.Client)})

	s := harness.NewScenario(t, "cloudscale")
	defer s.Cleanup()
	s.CreateSecret("cloudscale-credentials", map[string][]byte{
		"token": []byte("cloudscale-api-token"), "apiURL": []byte(server.URL),
	})
	s.G.Expect(env.Client.Create(s.Ctx, &v1alpha1.NodeProvider{
		ObjectMeta: metav1.ObjectMeta{Name: s.Name},
		Spec: v1alpha1.NodeProviderSpec{
			Type:                 v1alpha1.ProviderTypeCloudscale,
			CredentialsSecretRef: &v1alpha1.SecretReference{Name: "cloudscale-credentials", Namespace: harness.ControllerNamespace},
			Cloudscale:           &v1alpha1.CloudscaleSettings{Zone: "lpg1", Image: "debian-12", VolumeSizeGB: 50},
		},
	})).To(Succeed())
	s.CreatePool(func(pool *v1alpha1.NodePool) {
		pool.Spec.Shapes.Fixed = []v1alpha1.Shape{{Name: "flex-16-4"}}
	})

	ctx, stopKubelets := context.WithCancel(context.Background())
	defer stopKubelets()
	ourServers := func() []harness.Machine {
		var ours []harness.Machine
		for _, srv := range server.Servers() {
			if srv.Tags[v1alpha1.TagCluster] == harness.ClusterName {
				ours = append(ours, harness.Machine{Name: srv.Name, ProviderID: cloudscale.ProviderID(srv.UUID)})
			}
		}
		return ours
	}
	harness.RunKubelets(ctx, t, ourServers)

	deployment := s.CreateDeployment("on-cloudscale", 2, "1", nil)
	s.G.Eventually(func() int { return s.RunningPods("on-cloudscale") }).Should(Equal(2))
	s.G.Eventually(s.ReadyClaims).Should(Equal(1))
	claim := s.Claims()[0]
	servers := ourServers()
	s.G.Expect(servers).To(HaveLen(1))
	s.G.Expect(servers[0].Name).To(Equal(claim.Name))
	s.G.Expect(claim.Status.ProviderID).To(Equal(servers[0].ProviderID))
	// The stand-in kubelet sets neither; the node must carry what its
	// template node was simulated with.
	var node corev1.Node
	s.G.Expect(env.Client.Get(s.Ctx, client.ObjectKey{Name: claim.Status.NodeName}, &node)).To(Succeed())
	s.G.Expect(node.Labels).To(HaveKeyWithValue(corev1.LabelInstanceTypeStable, "flex-16-4"))
	s.G.Expect(node.Labels).To(HaveKeyWithValue(corev1.LabelTopologyZone, "lpg1"))
	for _, srv := range server.Servers() {
		s.G.Expect(srv.Tags).To(HaveKeyWithValue(v1alpha1.TagNodeClaim, claim.Name))
		s.G.Expect(srv.Tags).To(HaveKeyWithValue(v1alpha1.TagNodePool, s.Name))
	}

	s.Scale(deployment, 0)
	s.G.Eventually(func() int { return len(s.Claims()) + len(s.Nodes()) }).Should(BeZero())
	s.G.Eventually(ourServers).Should(BeEmpty(), "the server is deleted on the cloudscale API")
	var pool v1alpha1.NodePool
	s.G.Expect(env.Client.Get(s.Ctx, client.ObjectKey{Name: s.Name}, &pool)).To(Succeed())
}
