package bootstrap

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	certutil "k8s.io/client-go/util/cert"
	"sigs.k8s.io/yaml"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/internal/scheduling"
)

func testPool(method v1alpha1.JoinMethod) *v1alpha1.NodePool {
	maxPods := int32(58)
	return &v1alpha1.NodePool{
		ObjectMeta: metav1.ObjectMeta{Name: "workers"},
		Spec: v1alpha1.NodePoolSpec{Template: v1alpha1.NodeTemplate{
			Labels:        map[string]string{"team": "data", "example.com/tier": "batch"},
			Taints:        []corev1.Taint{{Key: "dedicated", Value: "data", Effect: corev1.TaintEffectNoSchedule}},
			StartupTaints: []corev1.Taint{{Key: "node.cilium.io/agent-not-ready", Effect: corev1.TaintEffectNoExecute}},
			Kubelet: v1alpha1.KubeletConfiguration{
				MaxPods:        &maxPods,
				KubeReserved:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("256Mi")},
				SystemReserved: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("128Mi")},
				EvictionHard:   map[string]v1alpha1.EvictionThreshold{"memory.available": "200Mi", "nodefs.available": "5%"},
			},
			Bootstrap: &v1alpha1.Bootstrap{Method: method},
		}},
	}
}

func testClaim() *v1alpha1.NodeClaim {
	return &v1alpha1.NodeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "workers-abc12"},
		Spec: v1alpha1.NodeClaimSpec{
			NodePoolRef: v1alpha1.NodePoolReference{Name: "workers"},
			Shape:       v1alpha1.ClaimShape{Name: "plus-4-8", CPU: resource.MustParse("4"), Memory: resource.MustParse("8Gi")},
			Requirements: v1alpha1.NodeClaimRequirements{NodeSelector: []corev1.NodeSelectorRequirement{
				{Key: corev1.LabelTopologyZone, Operator: corev1.NodeSelectorOpIn, Values: []string{"lpg1"}},
			}},
		},
	}
}

func testCluster(t *testing.T) ClusterInfo {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := certutil.NewSelfSignedCACert(certutil.Config{CommonName: "kubernetes"}, key)
	if err != nil {
		t.Fatal(err)
	}
	info, err := newClusterInfo("10.0.0.1:6443", pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Raw}))
	if err != nil {
		t.Fatal(err)
	}
	return info
}

var testToken = Token{ID: "abcdef", Secret: "0123456789abcdef", ExpiresAt: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)}

// kubeletFlags are the kubelet flags a rendered template sets, by name.
type kubeletFlags map[string]string

// The built-in templates give the kubelet exactly the labels, taints,
// max pods, reservations and eviction thresholds the template node was
// simulated with: a node that registers from them has the template node's
// labels, taints and allocatable.
func TestBuiltInTemplatesCarryTheTemplateNode(t *testing.T) {
	for _, method := range []v1alpha1.JoinMethod{v1alpha1.JoinKubeadm, v1alpha1.JoinK3s} {
		t.Run(string(method), func(t *testing.T) {
			pool, claim := testPool(method), testClaim()
			cluster := testCluster(t)
			userData := render(t, pool, claim, cluster)
			var flags kubeletFlags
			switch method {
			case v1alpha1.JoinKubeadm:
				flags = kubeadmFlags(t, userData, cluster)
			case v1alpha1.JoinK3s:
				flags = k3sFlags(t, userData, cluster)
			}

			shape := scheduling.Shape{Name: claim.Spec.Shape.Name, CPU: claim.Spec.Shape.CPU, Memory: claim.Spec.Shape.Memory}
			want, err := scheduling.TemplateNode(pool, shape, "lpg1", claim.Name)
			if err != nil {
				t.Fatal(err)
			}
			if got := parseLabels(flags["node-labels"]); !maps.Equal(got, want.Labels) {
				t.Errorf("node labels %v, template node has %v", got, want.Labels)
			}
			wantTaints := slices.Concat(want.Spec.Taints, pool.Spec.Template.StartupTaints,
				[]corev1.Taint{{Key: v1alpha1.TaintUnregistered, Effect: corev1.TaintEffectNoSchedule}})
			if got := parseTaints(t, flags["register-with-taints"]); !slices.EqualFunc(got, wantTaints, func(a, b corev1.Taint) bool { return a.MatchTaint(&b) && a.Value == b.Value }) {
				t.Errorf("taints %v, want the template node's, the startup taints and the unregistered taint %v", got, wantTaints)
			}
			if got := flags["max-pods"]; got != want.Status.Capacity.Pods().String() {
				t.Errorf("max-pods %s, template node has %s pods", got, want.Status.Capacity.Pods())
			}
			allocatable := allocatableFromFlags(t, want.Status.Capacity, flags)
			for _, name := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory, corev1.ResourceEphemeralStorage} {
				got, wantQ := allocatable[name], want.Status.Allocatable[name]
				if got.Cmp(wantQ) != 0 {
					t.Errorf("a kubelet with these flags allocates %s %s, the template node %s", name, got.String(), wantQ.String())
				}
			}
		})
	}
}

func render(t *testing.T, pool *v1alpha1.NodePool, claim *v1alpha1.NodeClaim, cluster ClusterInfo) []byte {
	t.Helper()
	text, err := DefaultTemplate(pool.Spec.Template.Bootstrap.Method)
	if err != nil {
		t.Fatal(err)
	}
	data, err := NewData(Input{Pool: pool, Claim: claim, Cluster: cluster, Token: testToken})
	if err != nil {
		t.Fatal(err)
	}
	out, err := Render("test", text, data)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// cloudConfig is the part of cloud-init's user data the templates use.
type cloudConfig struct {
	WriteFiles []struct {
		Path    string `json:"path"`
		Content string `json:"content"`
	} `json:"write_files"`
	RunCmd []any `json:"runcmd"`
}

func parseCloudConfig(t *testing.T, userData []byte) cloudConfig {
	t.Helper()
	if !strings.HasPrefix(string(userData), "#cloud-config\n") {
		t.Fatalf("user data does not start with #cloud-config")
	}
	var config cloudConfig
	if err := yaml.Unmarshal(userData, &config); err != nil {
		t.Fatalf("user data is not YAML: %v", err)
	}
	if len(config.WriteFiles) != 1 || len(config.RunCmd) == 0 {
		t.Fatalf("want one file and a command, got %d files, %d commands", len(config.WriteFiles), len(config.RunCmd))
	}
	return config
}

// kubeadmFlags reads the JoinConfiguration kubeadm is run with.
func kubeadmFlags(t *testing.T, userData []byte, cluster ClusterInfo) kubeletFlags {
	t.Helper()
	config := parseCloudConfig(t, userData)
	var join struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Discovery  struct {
			BootstrapToken struct {
				APIServerEndpoint string   `json:"apiServerEndpoint"`
				Token             string   `json:"token"`
				CACertHashes      []string `json:"caCertHashes"`
			} `json:"bootstrapToken"`
		} `json:"discovery"`
		NodeRegistration struct {
			Name             string         `json:"name"`
			Taints           []corev1.Taint `json:"taints"`
			KubeletExtraArgs []struct {
				Name  string `json:"name"`
				Value string `json:"value"`
			} `json:"kubeletExtraArgs"`
		} `json:"nodeRegistration"`
	}
	if err := yaml.UnmarshalStrict([]byte(config.WriteFiles[0].Content), &join); err != nil {
		t.Fatalf("join configuration: %v", err)
	}
	discovery := join.Discovery.BootstrapToken
	if join.Kind != "JoinConfiguration" || join.APIVersion != "kubeadm.k8s.io/v1beta4" {
		t.Errorf("kind %s %s, want kubeadm.k8s.io/v1beta4 JoinConfiguration", join.APIVersion, join.Kind)
	}
	// kubeadm's pin: sha256 of the CA's SubjectPublicKeyInfo.
	spki := sha256.Sum256(cluster.CACertificates[0].RawSubjectPublicKeyInfo)
	if discovery.APIServerEndpoint != "10.0.0.1:6443" || discovery.Token != "abcdef.0123456789abcdef" ||
		!slices.Equal(discovery.CACertHashes, []string{"sha256:" + hex.EncodeToString(spki[:])}) {
		t.Errorf("discovery %+v", discovery)
	}
	if join.NodeRegistration.Name != "workers-abc12" {
		t.Errorf("node name %q", join.NodeRegistration.Name)
	}
	flags := kubeletFlags{}
	for _, arg := range join.NodeRegistration.KubeletExtraArgs {
		flags[arg.Name] = arg.Value
	}
	return flags
}

// k3sFlags reads the k3s agent's config file.
func k3sFlags(t *testing.T, userData []byte, cluster ClusterInfo) kubeletFlags {
	t.Helper()
	config := parseCloudConfig(t, userData)
	var agent struct {
		Server     string   `json:"server"`
		Token      string   `json:"token"`
		NodeName   string   `json:"node-name"`
		NodeLabel  []string `json:"node-label"`
		NodeTaint  []string `json:"node-taint"`
		KubeletArg []string `json:"kubelet-arg"`
	}
	if err := yaml.UnmarshalStrict([]byte(config.WriteFiles[0].Content), &agent); err != nil {
		t.Fatalf("k3s config: %v", err)
	}
	// k3s's secure token: K10, the sha256 of the CA bundle, ::, the
	// credentials (docs.k3s.io/cli/token).
	caSum := sha256.Sum256(cluster.CAPEM)
	if agent.Server != "https://10.0.0.1:6443" || agent.Token != "K10"+hex.EncodeToString(caSum[:])+"::abcdef.0123456789abcdef" || agent.NodeName != "workers-abc12" {
		t.Errorf("k3s agent config %+v", agent)
	}
	flags := kubeletFlags{"node-labels": strings.Join(agent.NodeLabel, ","), "register-with-taints": strings.Join(agent.NodeTaint, ",")}
	for _, arg := range agent.KubeletArg {
		name, value, _ := strings.Cut(arg, "=")
		flags[name] = value
	}
	return flags
}

func parseLabels(flag string) map[string]string {
	labels := map[string]string{}
	for _, kv := range strings.Split(flag, ",") {
		k, v, _ := strings.Cut(kv, "=")
		labels[k] = v
	}
	return labels
}

// parseTaints reads --register-with-taints: key[=value]:Effect, commas
// between.
func parseTaints(t *testing.T, flag string) []corev1.Taint {
	var taints []corev1.Taint
	for _, spec := range strings.Split(flag, ",") {
		kv, effect, ok := strings.Cut(spec, ":")
		if !ok {
			t.Fatalf("taint %q has no effect", spec)
		}
		k, v, _ := strings.Cut(kv, "=")
		taints = append(taints, corev1.Taint{Key: k, Value: v, Effect: corev1.TaintEffect(effect)})
	}
	return taints
}

// allocatableFromFlags is what a kubelet started with the flags reports:
// capacity less kube-reserved, system-reserved and the memory.available and
// nodefs.available hard eviction thresholds.
func allocatableFromFlags(t *testing.T, capacity corev1.ResourceList, flags kubeletFlags) corev1.ResourceList {
	t.Helper()
	out := capacity.DeepCopy()
	for _, flag := range []string{"kube-reserved", "system-reserved"} {
		for _, kv := range strings.Split(flags[flag], ",") {
			name, value, _ := strings.Cut(kv, "=")
			q := out[corev1.ResourceName(name)]
			q.Sub(resource.MustParse(value))
			out[corev1.ResourceName(name)] = q
		}
	}
	for _, threshold := range strings.Split(flags["eviction-hard"], ",") {
		signal, value, _ := strings.Cut(threshold, "<")
		name := map[string]corev1.ResourceName{"memory.available": corev1.ResourceMemory, "nodefs.available": corev1.ResourceEphemeralStorage}[signal]
		c := capacity[name]
		var q resource.Quantity
		if p, ok := strings.CutSuffix(value, "%"); ok {
			q = *resource.NewQuantity(c.Value()*int64(mustAtoi(t, p))/100, resource.BinarySI)
		} else {
			q = resource.MustParse(value)
		}
		left := out[name]
		left.Sub(q)
		out[name] = left
	}
	return out
}

func mustAtoi(t *testing.T, s string) int {
	q, err := resource.ParseQuantity(s)
	if err != nil {
		t.Fatal(err)
	}
	return int(q.Value())
}

// A pool that sets no reservations or eviction thresholds gets none on the
// kubelet's command line (the kubelet's defaults are what the template node
// assumed), and a pool without taints only the unregistered taint.
func TestBuiltInTemplatesLeaveUnsetSettingsToTheKubelet(t *testing.T) {
	pool := testPool(v1alpha1.JoinKubeadm)
	pool.Spec.Template.Taints, pool.Spec.Template.StartupTaints = nil, nil
	pool.Spec.Template.Kubelet = v1alpha1.KubeletConfiguration{}
	cluster := testCluster(t)
	flags := kubeadmFlags(t, render(t, pool, testClaim(), cluster), cluster)
	if got, want := flags["register-with-taints"], v1alpha1.TaintUnregistered+":NoSchedule"; got != want {
		t.Errorf("register-with-taints %q for a pool without taints, want %q", got, want)
	}
	for _, name := range []string{"kube-reserved", "system-reserved", "eviction-hard"} {
		if v, ok := flags[name]; ok {
			t.Errorf("flag %s=%q set for a pool that sets nothing", name, v)
		}
	}
	if flags["max-pods"] != "110" {
		t.Errorf("max-pods %q, want the default 110", flags["max-pods"])
	}
}

// A shared token is passed through as is and marked; no token id appears.
func TestSharedTokenIsMarkedShared(t *testing.T) {
	pool := testPool(v1alpha1.JoinK3s)
	data, err := NewData(Input{Pool: pool, Claim: testClaim(), Cluster: testCluster(t), Shared: "K10abc::server:secret"})
	if err != nil {
		t.Fatal(err)
	}
	if !data.TokenShared || data.TokenID != "" || data.K3sToken != "K10abc::server:secret" {
		t.Errorf("shared token data: shared %v id %q k3s %q", data.TokenShared, data.TokenID, data.K3sToken)
	}
	text, _ := DefaultTemplate(v1alpha1.JoinK3s)
	out, err := Render("k3s", text, data)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), "SHARED agent token") {
		t.Errorf("rendered user data does not say its token is shared")
	}
}

// A template error names the template and the action, not the data.
func TestRenderErrorsDoNotCarryTheToken(t *testing.T) {
	data, err := NewData(Input{Pool: testPool(v1alpha1.JoinCustom), Claim: testClaim(), Cluster: testCluster(t), Token: testToken})
	if err != nil {
		t.Fatal(err)
	}
	for _, text := range []string{"{{ .Token }} {{ .NoSuchField }}", "{{ .Token | printf \"%d\" | quote }}{{ index .Labels 3 }}", "{{ .Token"} {
		_, err := Render("custom", text, data)
		if err == nil {
			t.Fatalf("template %q rendered", text)
		}
		if strings.Contains(err.Error(), testToken.Secret) {
			t.Errorf("error carries the token: %v", err)
		}
	}
}

func TestCACertHashesMatchKubeadm(t *testing.T) {
	cluster := testCluster(t)
	cert, err := x509.ParseCertificate(cluster.CACertificates[0].Raw)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(cert.RawSubjectPublicKeyInfo)
	if got := CACertHashes([]*x509.Certificate{cert}); len(got) != 1 || got[0] != "sha256:"+hex.EncodeToString(sum[:]) {
		t.Errorf("hashes %v", got)
	}
}
