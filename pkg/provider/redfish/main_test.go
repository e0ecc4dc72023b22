package redfish_test

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/internal/testenv"
	"github.com/claimscale/claimscale/pkg/provider"
	"github.com/claimscale/claimscale/pkg/provider/redfish"
	"github.com/claimscale/claimscale/pkg/provider/redfish/redfishtest"
)

// env is one API server for the leases; each test keeps to a namespace
// of its own.
var env *testenv.Environment

func TestMain(m *testing.M) { testenv.RunMain(m, testenv.Options{}, &env, nil) }

const (
	testCluster  = "test-cluster"
	testUser     = "claimscale"
	testPassword = "s3cret-bmc-passw0rd"
)

var serials atomic.Int64

// rack is a test's inventory: one fake BMC per server, as in a rack.
type rack struct {
	t         *testing.T
	namespace string
	bmcs      map[string]*redfishtest.BMC
	servers   []v1alpha1.RedfishServer
}

// newRack starts a BMC per server: name → shape, sized as the pool's
// shapes (small 8 cpus 32 GiB, large 16 cpus 64 GiB), all off.
func newRack(t *testing.T, servers ...string) *rack {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "redfish-"}}
	if err := env.Client.Create(t.Context(), ns); err != nil {
		t.Fatalf("creating a namespace: %v", err)
	}
	r := &rack{t: t, namespace: ns.Name, bmcs: map[string]*redfishtest.BMC{}}
	for i := 0; i+1 < len(servers); i += 2 {
		name, shape := servers[i], servers[i+1]
		cpus, memory := 8, 32.0
		if shape == "large" {
			cpus, memory = 16, 64.0
		}
		bmc := redfishtest.New(testUser, testPassword, redfishtest.System{
			ID: "1", UUID: fmt.Sprintf("4c4c4544-0000-%04d-8000-b2c04f%06d", serials.Add(1), i), CPUs: cpus, MemoryGiB: memory,
		})
		bmc.Transition = 30 * time.Millisecond
		t.Cleanup(bmc.Close)
		r.bmcs[name] = bmc
		r.servers = append(r.servers, v1alpha1.RedfishServer{Name: name, Endpoint: bmc.URL(), Shape: shape, Zone: "rack-1"})
	}
	return r
}

func (r *rack) settings(edit ...func(*v1alpha1.RedfishSettings)) *v1alpha1.RedfishSettings {
	settings := &v1alpha1.RedfishSettings{
		Servers: append([]v1alpha1.RedfishServer(nil), r.servers...), InsecureSkipTLSVerify: true,
		ShutdownTimeout: &metav1.Duration{Duration: time.Second},
	}
	for _, e := range edit {
		e(settings)
	}
	return settings
}

func (r *rack) provider(cluster string, settings *v1alpha1.RedfishSettings, cfg redfish.Config) *redfish.Provider {
	r.t.Helper()
	cfg.Kube = env.Client
	cfg.PollInterval = orDefault(cfg.PollInterval, 10*time.Millisecond)
	cfg.CallTimeout = orDefault(cfg.CallTimeout, 5*time.Second)
	cfg.InventoryTTL = orDefault(cfg.InventoryTTL, time.Nanosecond)
	p, err := redfish.New(r.t.Context(), &v1alpha1.NodeProvider{
		ObjectMeta: metav1.ObjectMeta{Name: "metal"},
		Spec:       v1alpha1.NodeProviderSpec{Type: v1alpha1.ProviderTypeRedfish, Redfish: settings},
	}, provider.Options{
		ClusterName: cluster, Namespace: r.namespace,
		Credentials: map[string][]byte{"username": []byte(testUser), "password": []byte(testPassword)},
	}, cfg)
	if err != nil {
		r.t.Fatalf("building the provider: %v", err)
	}
	return p
}

func orDefault(d, fallback time.Duration) time.Duration {
	if d == 0 {
		return fallback
	}
	return d
}

// powerOf is the server's power state once transitions settle.
func (r *rack) powerOf(server string) string {
	return r.bmcs[server].System("1").PowerState
}

func pool() *v1alpha1.NodePool {
	cpu8, mem32, cpu16, mem64 := resource.MustParse("8"), resource.MustParse("32Gi"), resource.MustParse("16"), resource.MustParse("64Gi")
	return &v1alpha1.NodePool{
		ObjectMeta: metav1.ObjectMeta{Name: "metal"},
		Spec: v1alpha1.NodePoolSpec{Shapes: v1alpha1.Shapes{Fixed: []v1alpha1.Shape{
			{Name: "small", CPU: &cpu8, Memory: &mem32, Price: "0.08"},
			{Name: "large", CPU: &cpu16, Memory: &mem64, Price: "0.15"},
		}}},
	}
}

func claim(name, shape string) *v1alpha1.NodeClaim {
	cpu, memory := "8", "32Gi"
	if shape == "large" {
		cpu, memory = "16", "64Gi"
	}
	return &v1alpha1.NodeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1alpha1.NodeClaimSpec{
			NodePoolRef: v1alpha1.NodePoolReference{Name: "metal"},
			Shape:       v1alpha1.ClaimShape{Name: shape, CPU: resource.MustParse(cpu), Memory: resource.MustParse(memory)},
		},
	}
}
