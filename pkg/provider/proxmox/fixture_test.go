package proxmox_test

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/pkg/provider"
	"github.com/claimscale/claimscale/pkg/provider/proxmox"
	"github.com/claimscale/claimscale/pkg/provider/proxmox/proxmoxtest"
)

const (
	clusterName = "test-cluster"
	tokenID     = "claimscale@pve!autoscaler"
	tokenSecret = "5f0c1b7e-token-secret-value"
	templateID  = 9000
)

// defaultNodes: pve1 has the most free memory (56 GiB), pve2 30 GiB, pve3
// is offline.
func defaultNodes() []proxmoxtest.Node {
	return []proxmoxtest.Node{
		{Name: "pve1", CPUs: 16, MemoryMiB: 64 << 10, UsedMemoryMiB: 8 << 10, CPULoad: 0.1},
		{Name: "pve2", CPUs: 8, MemoryMiB: 32 << 10, UsedMemoryMiB: 2 << 10, CPULoad: 0.1},
		{Name: "pve3", CPUs: 32, MemoryMiB: 256 << 10, Offline: true},
	}
}

// template is the cloud-init template VM the clone path copies.
func template() proxmoxtest.VM {
	return proxmoxtest.VM{
		VMID: templateID, Node: "pve1", Name: "ubuntu-2404-ci", Template: true,
		Config: map[string]string{
			"cores": "2", "memory": "2048", "tags": "ubuntu",
			"net0":  "virtio=BC:24:11:00:00:01,bridge=vmbr0",
			"scsi0": "local-lvm:base-9000-disk-0,size=20G", "ide2": "local-lvm:vm-9000-cloudinit,media=cdrom",
		},
	}
}

// cloneProvider is a NodeProvider that clones the template.
func cloneProvider(endpoint string) *v1alpha1.NodeProvider {
	overhead := resource.MustParse("256Mi")
	return &v1alpha1.NodeProvider{
		ObjectMeta: metav1.ObjectMeta{Name: "pve"},
		Spec: v1alpha1.NodeProviderSpec{
			Type:                 v1alpha1.ProviderTypeProxmox,
			CredentialsSecretRef: &v1alpha1.SecretReference{Name: "pve-credentials", Namespace: "claimscale-system"},
			Proxmox: &v1alpha1.ProxmoxSettings{
				Endpoint:          endpoint,
				VMIDRange:         v1alpha1.VMIDRange{Lower: 1000, Upper: 1009},
				Clone:             &v1alpha1.ProxmoxClone{TemplateID: templateID, Full: ptr.To(true)},
				Storage:           "local-lvm",
				NetworkInterfaces: []v1alpha1.ProxmoxNetworkInterface{{Model: "virtio", Bridge: "vmbr0", VLANTag: ptr.To[int32](20)}},
				CICustom:          "vendor=local:snippets/k3s-join.yaml",
				MemoryOverhead:    &overhead,
				ExtraOptions:      []v1alpha1.NameValue{{Name: "agent", Value: "1"}, {Name: "ipconfig0", Value: "ip=dhcp"}},
			},
		},
	}
}

// netbootProvider is a NodeProvider that makes blank VMs booting from net0.
func netbootProvider(endpoint string) *v1alpha1.NodeProvider {
	np := cloneProvider(endpoint)
	np.Spec.Proxmox.Clone = nil
	np.Spec.Proxmox.CICustom = ""
	np.Spec.Proxmox.ExtraOptions = []v1alpha1.NameValue{{Name: "cpu", Value: "host"}}
	np.Spec.Proxmox.Netboot = &v1alpha1.ProxmoxNetboot{BootOrder: "net0", DiskSize: "32G", OSType: "l26"}
	return np
}

func tokenCredentials(api *proxmoxtest.Server) map[string][]byte {
	return map[string][]byte{
		proxmox.SecretKeyTokenID:     []byte(tokenID),
		proxmox.SecretKeyTokenSecret: []byte(tokenSecret),
		proxmox.SecretKeyCA:          api.CACertPEM(),
	}
}

// fakeAPI starts the fake Proxmox API with the default nodes, the template
// and the test token.
func fakeAPI(t testing.TB, nodes ...proxmoxtest.Node) *proxmoxtest.Server {
	t.Helper()
	if len(nodes) == 0 {
		nodes = defaultNodes()
	}
	api := proxmoxtest.NewServer(nodes...)
	t.Cleanup(api.Close)
	api.SetAPIToken(tokenID, tokenSecret)
	api.AddVM(template())
	return api
}

var fastTasks = proxmox.Tuning{TaskPollInterval: time.Millisecond, TaskTimeout: 10 * time.Second}

// newProvider builds the provider against the fake API.
func newProvider(t testing.TB, api *proxmoxtest.Server, np *v1alpha1.NodeProvider) provider.Provider {
	t.Helper()
	p, err := proxmox.NewFactory(fastTasks)(context.Background(), np, provider.Options{ClusterName: clusterName, Credentials: tokenCredentials(api)})
	if err != nil {
		t.Fatalf("building the provider: %v", err)
	}
	return p
}

func claim(name, cpu, memory string) *v1alpha1.NodeClaim {
	return &v1alpha1.NodeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1alpha1.NodeClaimSpec{
			NodePoolRef: v1alpha1.NodePoolReference{Name: "workers"},
			Shape:       v1alpha1.ClaimShape{Name: "medium", CPU: resource.MustParse(cpu), Memory: resource.MustParse(memory)},
		},
	}
}

// logSink collects log lines of every verbosity.
type logSink struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (s *logSink) logger() logr.Logger {
	return funcr.New(func(prefix, args string) {
		s.mu.Lock()
		defer s.mu.Unlock()
		fmt.Fprintln(&s.buf, prefix, args)
	}, funcr.Options{Verbosity: 10})
}

func (s *logSink) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.String()
}

// loggingContext returns a context whose logger writes into a sink.
func loggingContext(t *testing.T) (context.Context, *logSink) {
	sink := &logSink{}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return logf.IntoContext(ctx, sink.logger()), sink
}
