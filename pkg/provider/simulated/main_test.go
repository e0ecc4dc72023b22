package simulated

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/internal/testenv"
	"github.com/claimscale/claimscale/pkg/provider"
)

// env is one API server (with kwok) shared by the package's tests; each test
// keeps to its own namespace, cluster name and claim names.
var env *testenv.Environment

func TestMain(m *testing.M) {
	flag.Parse()
	if fuzzing() {
		// The fuzz targets need no API server, and go test -fuzz starts
		// one worker process per core: one control plane each would
		// take the machine.
		os.Exit(m.Run())
	}
	var err error
	env, err = testenv.Start(testenv.Options{Kwok: true})
	if err != nil {
		fmt.Fprintln(os.Stderr, "starting the test control plane:", err)
		os.Exit(1)
	}
	code := m.Run()
	if err := env.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "stopping the test control plane:", err)
	}
	os.Exit(code)
}

// fuzzing says whether this process only fuzzes: a -fuzz run, or one of
// its workers.
func fuzzing() bool {
	for _, name := range []string{"test.fuzz", "test.fuzzworker"} {
		if f := flag.Lookup(name); f != nil && f.Value.String() != "" && f.Value.String() != "false" {
			return true
		}
	}
	return false
}

// newNamespace makes a namespace for one test's machine records.
func newNamespace(t *testing.T) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "simulated-"}}
	if err := env.Client.Create(t.Context(), ns); err != nil {
		t.Fatalf("creating namespace: %v", err)
	}
	return ns.Name
}

// names counts the names uniqueName gave, so tests run again in the same
// process (-count) do not meet the cluster-scoped objects of earlier runs.
var names atomic.Int64

// uniqueName turns a test's name into a name no other object uses.
func uniqueName(t *testing.T, suffix string) string {
	name := strings.ToLower(strings.NewReplacer("/", "-", "_", "-", ",", "").Replace(t.Name()))
	if len(name) > 40 {
		name = name[len(name)-40:]
	}
	return fmt.Sprintf("%s-%s-%d", strings.Trim(name, "-"), suffix, names.Add(1))
}

func nodeProvider(sim *v1alpha1.SimulatedSettings) *v1alpha1.NodeProvider {
	return &v1alpha1.NodeProvider{
		ObjectMeta: metav1.ObjectMeta{Name: "sim"},
		Spec:       v1alpha1.NodeProviderSpec{Type: v1alpha1.ProviderTypeSimulated, Simulated: sim},
	}
}

// newTestProvider builds a provider whose registrar the test drives itself.
func newTestProvider(t *testing.T, namespace, cluster string, sim *v1alpha1.SimulatedSettings, cfg Config) *Provider {
	t.Helper()
	cfg.ExternalRegistrar = true
	cfg.Kube = env.Client
	p, err := NewWithConfig(t.Context(), nodeProvider(sim), provider.Options{
		ClusterName: cluster,
		Namespace:   namespace,
	}, cfg)
	if err != nil {
		t.Fatalf("building provider: %v", err)
	}
	return p
}

func newClaim(name, pool string) *v1alpha1.NodeClaim {
	return &v1alpha1.NodeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1alpha1.NodeClaimSpec{
			NodePoolRef: v1alpha1.NodePoolReference{Name: pool},
			Shape: v1alpha1.ClaimShape{
				Name:   "s-4-8",
				CPU:    resource.MustParse("4"),
				Memory: resource.MustParse("8Gi"),
			},
		},
	}
}

func durationPtr(d time.Duration) *metav1.Duration { return &metav1.Duration{Duration: d} }

// machineRecords lists the machine ConfigMaps in a namespace, whatever
// their cluster.
func machineRecords(t *testing.T, namespace string) []corev1.ConfigMap {
	t.Helper()
	var list corev1.ConfigMapList
	if err := env.Client.List(t.Context(), &list, client.InNamespace(namespace), client.HasLabels{LabelMachine}); err != nil {
		t.Fatalf("listing machine records: %v", err)
	}
	return list.Items
}

// getNode returns the Node named name, or nil when there is none.
func getNode(g gomega.Gomega, t *testing.T, name string) *corev1.Node {
	var node corev1.Node
	err := env.Client.Get(t.Context(), client.ObjectKey{Name: name}, &node)
	if client.IgnoreNotFound(err) != nil {
		g.Expect(err).NotTo(gomega.HaveOccurred())
	}
	if err != nil {
		return nil
	}
	return &node
}

// expectSameJSON compares two values by their JSON, which is canonical for
// quantities and times where their Go values are not.
func expectSameJSON(g gomega.Gomega, got, want any) {
	wantJSON, err := json.Marshal(want)
	g.Expect(err).NotTo(gomega.HaveOccurred())
	g.Expect(got).To(gomega.WithTransform(func(v any) (string, error) {
		b, err := json.Marshal(v)
		return string(b), err
	}, gomega.MatchJSON(wantJSON)))
}
