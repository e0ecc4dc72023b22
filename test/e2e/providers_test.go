package e2e

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/internal/operator"
	"github.com/claimscale/claimscale/internal/testenv"
	"github.com/claimscale/claimscale/pkg/provider/cloudscale"
	"github.com/claimscale/claimscale/pkg/provider/cloudscale/cloudscaletest"
	"github.com/claimscale/claimscale/pkg/provider/proxmox"
	"github.com/claimscale/claimscale/pkg/provider/proxmox/proxmoxtest"
)

// machine is what a stand-in kubelet needs to register a Node for a VM.
type machine struct{ name, providerID string }

// runKubelets registers a Node for every running machine the fake API
// reports, as the machine's kubelet would when it boots: named as the
// machine, with its providerID (as a cloud controller would set it), and
// annotated for kwok, which then keeps it Ready and runs its pods.
func runKubelets(ctx context.Context, t *testing.T, running func() []machine) {
	go func() {
		ticker := time.NewTicker(200 * time.Millisecond)
		defer ticker.Stop()
		for {
			for _, m := range running() {
				node := &corev1.Node{
					ObjectMeta: metav1.ObjectMeta{
						Name:        m.name,
						Annotations: map[string]string{testenv.KwokNodeAnnotation: "fake"},
						Labels:      map[string]string{corev1.LabelHostname: m.name, "type": "kwok"},
					},
					Spec: corev1.NodeSpec{ProviderID: m.providerID},
					Status: corev1.NodeStatus{
						Capacity: corev1.ResourceList{
							corev1.ResourceCPU: resource.MustParse("4"), corev1.ResourceMemory: resource.MustParse("16Gi"),
							corev1.ResourcePods: resource.MustParse("110"),
						},
						Allocatable: corev1.ResourceList{
							corev1.ResourceCPU: resource.MustParse("4"), corev1.ResourceMemory: resource.MustParse("16Gi"),
							corev1.ResourcePods: resource.MustParse("110"),
						},
					},
				}
				if err := env.Client.Create(ctx, node); err != nil && !apierrors.IsAlreadyExists(err) && ctx.Err() == nil {
					t.Logf("registering node %s: %v", m.name, err)
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

func (s *scenario) createSecret(name string, data map[string][]byte) {
	s.g.Expect(env.Client.Create(s.ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: controllerNamespace},
		Data:       data,
	})).To(Succeed())
	s.t.Cleanup(func() {
		_ = env.Client.Delete(context.Background(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: controllerNamespace}})
	})
}

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
	startOperator(t, operatorOptions{registry: registry})

	s := newScenario(t, "proxmox")
	defer s.cleanup()
	s.createSecret("proxmox-credentials", map[string][]byte{
		proxmox.SecretKeyTokenID: []byte("claimscale@pve!autoscaler"), proxmox.SecretKeyTokenSecret: []byte("token-secret-value"),
		proxmox.SecretKeyCA: server.CACertPEM(),
	})
	s.g.Expect(env.Client.Create(s.ctx, &v1alpha1.NodeProvider{
		ObjectMeta: metav1.ObjectMeta{Name: s.name},
		Spec: v1alpha1.NodeProviderSpec{
			Type:                 v1alpha1.ProviderTypeProxmox,
			CredentialsSecretRef: &v1alpha1.SecretReference{Name: "proxmox-credentials", Namespace: controllerNamespace},
			Proxmox: &v1alpha1.ProxmoxSettings{
				Endpoint:          server.Endpoint(),
				VMIDRange:         v1alpha1.VMIDRange{Lower: 5000, Upper: 5099},
				Clone:             &v1alpha1.ProxmoxClone{TemplateID: 9000, Full: ptr(true)},
				NetworkInterfaces: []v1alpha1.ProxmoxNetworkInterface{{Model: "virtio", Bridge: "vmbr0"}},
			},
		},
	})).To(Succeed())
	s.createPool(nil)

	ctx, stopKubelets := context.WithCancel(context.Background())
	defer stopKubelets()
	ourVMs := func() []proxmoxtest.VM {
		var vms []proxmoxtest.VM
		for _, vm := range server.VMs() {
			if !vm.Template && strings.Contains(vm.Config["tags"], "claimscale-cluster."+clusterName) {
				vms = append(vms, vm)
			}
		}
		return vms
	}
	runKubelets(ctx, t, func() []machine {
		var running []machine
		for _, vm := range ourVMs() {
			if vm.Status == "running" && vm.Name != "" && vm.Lock == "" {
				running = append(running, machine{name: vm.Name, providerID: proxmox.ProviderID(clusterName, vm.VMID)})
			}
		}
		return running
	})

	deployment := s.createDeployment("on-proxmox", 2, "1", nil)
	s.g.Eventually(func() int { return s.runningPods("on-proxmox") }).Should(Equal(2))
	s.g.Eventually(s.readyClaims).Should(Equal(1))
	claim := s.claims()[0]
	s.g.Expect(claim.Status.ProviderID).To(HavePrefix("proxmox://" + clusterName + "/"))
	vms := ourVMs()
	s.g.Expect(vms).To(HaveLen(1))
	s.g.Expect(vms[0].Name).To(Equal(claim.Name))
	s.g.Expect(vms[0].VMID).To(BeNumerically(">=", 5000))
	s.g.Expect(claim.Status.ProviderID).To(HaveSuffix("/" + strconv.Itoa(vms[0].VMID)))

	s.scale(deployment, 0)
	s.g.Eventually(func() int { return len(s.claims()) + len(s.nodes()) }).Should(BeZero())
	s.g.Eventually(ourVMs).Should(BeEmpty(), "the VM is destroyed on the Proxmox API")
	_, templateKept := server.VMByName("debian-template")
	s.g.Expect(templateKept).To(BeTrue(), "the template, which is not ours, is untouched")
}

// The whole lifecycle on the cloudscale API: pending pods → claim → server
// created with our tags → a Node registers → Ready → pods Running → scale
// to zero → the server is deleted.
func TestCloudscaleLifecycle(t *testing.T) {
	server := cloudscaletest.NewServer(cloudscaletest.WithToken("cloudscale-api-token"), cloudscaletest.WithServersRunning())
	defer server.Close()
	startOperator(t, operatorOptions{registry: operator.DefaultRegistry(env.Client)})

	s := newScenario(t, "cloudscale")
	defer s.cleanup()
	s.createSecret("cloudscale-credentials", map[string][]byte{
		"token": []byte("cloudscale-api-token"), "apiURL": []byte(server.URL),
	})
	s.g.Expect(env.Client.Create(s.ctx, &v1alpha1.NodeProvider{
		ObjectMeta: metav1.ObjectMeta{Name: s.name},
		Spec: v1alpha1.NodeProviderSpec{
			Type:                 v1alpha1.ProviderTypeCloudscale,
			CredentialsSecretRef: &v1alpha1.SecretReference{Name: "cloudscale-credentials", Namespace: controllerNamespace},
			Cloudscale:           &v1alpha1.CloudscaleSettings{Zone: "lpg1", Image: "debian-12", VolumeSizeGB: 50},
		},
	})).To(Succeed())
	s.createPool(func(pool *v1alpha1.NodePool) {
		pool.Spec.Shapes.Fixed = []v1alpha1.Shape{{Name: "flex-16-4"}}
	})

	ctx, stopKubelets := context.WithCancel(context.Background())
	defer stopKubelets()
	ourServers := func() []machine {
		var ours []machine
		for _, srv := range server.Servers() {
			if srv.Tags[v1alpha1.TagCluster] == clusterName {
				ours = append(ours, machine{name: srv.Name, providerID: cloudscale.ProviderID(srv.UUID)})
			}
		}
		return ours
	}
	runKubelets(ctx, t, ourServers)

	deployment := s.createDeployment("on-cloudscale", 2, "1", nil)
	s.g.Eventually(func() int { return s.runningPods("on-cloudscale") }).Should(Equal(2))
	s.g.Eventually(s.readyClaims).Should(Equal(1))
	claim := s.claims()[0]
	servers := ourServers()
	s.g.Expect(servers).To(HaveLen(1))
	s.g.Expect(servers[0].name).To(Equal(claim.Name))
	s.g.Expect(claim.Status.ProviderID).To(Equal(servers[0].providerID))
	// The stand-in kubelet sets neither; the node must carry what its
	// template node was simulated with.
	var node corev1.Node
	s.g.Expect(env.Client.Get(s.ctx, client.ObjectKey{Name: claim.Status.NodeName}, &node)).To(Succeed())
	s.g.Expect(node.Labels).To(HaveKeyWithValue(corev1.LabelInstanceTypeStable, "flex-16-4"))
	s.g.Expect(node.Labels).To(HaveKeyWithValue(corev1.LabelTopologyZone, "lpg1"))
	for _, srv := range server.Servers() {
		s.g.Expect(srv.Tags).To(HaveKeyWithValue(v1alpha1.TagNodeClaim, claim.Name))
		s.g.Expect(srv.Tags).To(HaveKeyWithValue(v1alpha1.TagNodePool, s.name))
	}

	s.scale(deployment, 0)
	s.g.Eventually(func() int { return len(s.claims()) + len(s.nodes()) }).Should(BeZero())
	s.g.Eventually(ourServers).Should(BeEmpty(), "the server is deleted on the cloudscale API")
	var pool v1alpha1.NodePool
	s.g.Expect(env.Client.Get(s.ctx, client.ObjectKey{Name: s.name}, &pool)).To(Succeed())
}
