package integration

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	certutil "k8s.io/client-go/util/cert"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/internal/bootstrap"
	"github.com/claimscale/claimscale/internal/controllers/csrapproval"
	"github.com/claimscale/claimscale/internal/operator"
	"github.com/claimscale/claimscale/internal/scheduling"
	"github.com/claimscale/claimscale/internal/testenv"
	"github.com/claimscale/claimscale/pkg/provider"
	"github.com/claimscale/claimscale/test/e2e/internal/harness"
)

// The machine a kubemark hollow node plays: kubemark's fake cAdvisor
// reports 1 core and 4026531840 bytes of memory
// (pkg/kubelet/cadvisor/testing, fakeNumCores and fakeMemoryCapacity), so
// the pool's shape is exactly that, and the template node can be compared
// with what the real kubelet reports.
var hollowShape = v1alpha1.Shape{Name: "hollow-1-3840", CPU: harness.Qty("1"), Memory: harness.Qty("4026531840")}

// The kubelet flags kubemark's hollow node takes of those claimscale
// renders (cmd/kubemark/app/hollow_node.go, addFlags). It has no
// --kube-reserved, --system-reserved or --eviction-hard: a pool that sets
// them cannot be tried with it.
var hollowKubeletFlags = []string{"max-pods", "node-labels", "register-with-taints"}

// A claim's node joins with kubemark's hollow node (the real kubelet with a
// fake container runtime) given exactly what claimscale rendered for the
// kubeadm and the k3s template: the bootstrap kubeconfig from the token,
// endpoint and CA the user data names (the CA checked against the hashes
// it carries), and the kubelet flags it sets. The real TLS bootstrap runs,
// claimscale approves the request (kube-controller-manager, with kubeadm's
// auto-approval bindings in place, does not), NodeRestriction admits the
// labels, the Node registers with the template node's labels, taints,
// capacity and allocatable, and the claim binds by providerID and turns
// Ready. The same token's requests for another node's name, with extra
// usages, and after its node registered are each denied, with an event on
// the claim.
func TestHollowKubeletJoinsWithTheRenderedFlags(t *testing.T) {
	kubemark, err := testenv.Tool("kubemark")
	if err != nil {
		t.Fatal(err)
	}
	machines := &hollowMachines{machines: map[string]*hollowMachine{}}
	registry := operator.ProductionRegistry()
	registry.Register(v1alpha1.ProviderTypeSimulated, func(context.Context, *v1alpha1.NodeProvider, provider.Options) (provider.Provider, error) {
		return machines, nil
	})
	harness.StartOperator(t, harness.OperatorOptions{Registry: registry, SimulatedKubeletsElsewhere: true})
	for _, method := range []v1alpha1.JoinMethod{v1alpha1.JoinKubeadm, v1alpha1.JoinK3s} {
		t.Run(string(method), func(t *testing.T) { joinHollowNode(t, kubemark, machines, method) })
	}
}

func joinHollowNode(t *testing.T, kubemark string, machines *hollowMachines, method v1alpha1.JoinMethod) {
	s := harness.NewScenario(t, "hollow-"+string(method))
	defer s.Cleanup()
	g := s.G
	s.CreateProvider(v1alpha1.SimulatedSettings{})
	pool := s.CreatePool(func(pool *v1alpha1.NodePool) {
		pool.Spec.Template.Bootstrap = &v1alpha1.Bootstrap{Method: method}
		pool.Spec.Template.Labels["example.com/tier"] = "batch"
		pool.Spec.Template.Taints = []corev1.Taint{{Key: "dedicated", Value: "hollow", Effect: corev1.TaintEffectNoSchedule}}
		pool.Spec.Template.StartupTaints = []corev1.Taint{{Key: "example.com/agent-not-ready", Effect: corev1.TaintEffectNoExecute}}
		pool.Spec.Template.Kubelet.MaxPods = harness.Ptr(int32(58))
		pool.Spec.Shapes = v1alpha1.Shapes{Fixed: []v1alpha1.Shape{hollowShape}}
		// The node stays empty: nothing may consolidate it during the test.
		pool.Spec.Disruption.ConsolidateAfter = &metav1.Duration{Duration: time.Hour}
	})
	claim := &v1alpha1.NodeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: s.Name + "-a", Labels: map[string]string{v1alpha1.LabelNodePool: s.Name}},
		Spec: v1alpha1.NodeClaimSpec{
			NodePoolRef: v1alpha1.NodePoolReference{Name: s.Name},
			Shape:       v1alpha1.ClaimShape{Name: hollowShape.Name, CPU: *hollowShape.CPU, Memory: *hollowShape.Memory},
		},
	}
	g.Expect(env.Client.Create(s.Ctx, claim)).To(Succeed())

	// The machine is made with the rendered user data; it boots when the
	// test says.
	var userData []byte
	g.Eventually(func() []byte { userData = machines.userData(claim.Name); return userData }).ShouldNot(BeEmpty())
	g.Expect(env.Client.Get(s.Ctx, client.ObjectKeyFromObject(claim), claim)).To(Succeed())
	g.Expect(claim.Status.BootstrapToken).NotTo(BeNil())
	tokenID := claim.Status.BootstrapToken.ID
	var tokenSecret corev1.Secret
	g.Expect(env.Client.Get(s.Ctx, client.ObjectKey{Namespace: "kube-system", Name: "bootstrap-token-" + tokenID}, &tokenSecret)).To(Succeed())
	wantGroups := bootstrap.GroupNodeToken
	if method == v1alpha1.JoinK3s {
		wantGroups += "," + bootstrap.GroupK3sNodeToken
	}
	g.Expect(string(tokenSecret.Data["auth-extra-groups"])).To(Equal(wantGroups), "no group kubeadm binds auto-approval to")

	join := parseJoin(t, method, userData)
	g.Expect(join.nodeName).To(Equal(claim.Name))
	g.Expect(join.token).To(Equal(tokenID + "." + string(tokenSecret.Data["token-secret"])))
	g.Expect(slices.Sorted(maps.Keys(join.kubeletArgs))).To(Equal(hollowKubeletFlags),
		"the pool sets only what kubemark's hollow kubelet takes")

	// The token asks for another node's certificate, and for its own with
	// a serving usage besides: both denied, and the claim says so.
	stolen := harness.SubmitCSR(g, join.token, s.Name+"-stolen", "system:node:"+s.Name+"-victim")
	extra := harness.SubmitCSRWithUsages(g, join.token, s.Name+"-usages", "system:node:"+claim.Name,
		certificatesv1.UsageDigitalSignature, certificatesv1.UsageClientAuth, certificatesv1.UsageServerAuth)
	for _, csr := range []*certificatesv1.CertificateSigningRequest{stolen, extra} {
		t.Cleanup(func() { _ = env.Client.Delete(context.Background(), csr) })
		g.Eventually(func() string { return harness.DecisionOf(g, csr.Name) }).Should(Equal("Denied/" + csrapproval.ReasonDenied))
	}
	g.Eventually(func() []string { return harness.EventsOf(g, "NodeClaim", claim.Name) }).Should(ContainElements(
		And(HavePrefix(csrapproval.EventDenied+":"), ContainSubstring(stolen.Name), ContainSubstring(`"system:node:`+s.Name+`-victim"`)),
		And(HavePrefix(csrapproval.EventDenied+":"), ContainSubstring(extra.Name), ContainSubstring("not exactly a kubelet client's")),
	))

	// What the kubelet registers is watched from before it starts: the
	// Node as created, before claimscale adopts it.
	watcher, err := client.NewWithWatch(env.Config, client.Options{Scheme: env.Scheme})
	g.Expect(err).NotTo(HaveOccurred())
	nodes, err := watcher.Watch(s.Ctx, &corev1.NodeList{}, &client.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", claim.Name)})
	g.Expect(err).NotTo(HaveOccurred())
	defer nodes.Stop()
	machines.boot(t, claim.Name, bootHollowNode(t, kubemark, join))

	var registered *corev1.Node
	select {
	case event := <-nodes.ResultChan():
		g.Expect(event.Type).To(Equal(watch.Added))
		registered = event.Object.(*corev1.Node)
	case <-time.After(2 * time.Minute):
		t.Fatalf("node %s did not register within 2 minutes", claim.Name)
	}
	compareWithTemplate(t, g, pool, claim, registered)

	// The kubelet's own request, approved by claimscale and no one else.
	var requests certificatesv1.CertificateSigningRequestList
	g.Expect(env.Client.List(s.Ctx, &requests)).To(Succeed())
	var approved []string
	for _, csr := range requests.Items {
		if csr.Spec.Username == "system:bootstrap:"+tokenID && csr.Name != stolen.Name && csr.Name != extra.Name {
			t.Cleanup(func() { _ = env.Client.Delete(context.Background(), &csr) })
			approved = append(approved, harness.DecisionOf(g, csr.Name))
		}
	}
	g.Expect(approved).To(Equal([]string{"Approved/" + csrapproval.ReasonApproved}), "one request, approved by claimscale")
	g.Expect(harness.EventsOf(g, "NodeClaim", claim.Name)).To(ContainElement(HavePrefix(csrapproval.EventApproved + ":")))

	// The claim binds by providerID; once the agent the startup taint
	// waits for has removed it, the claim is Ready.
	g.Eventually(func() string {
		g.Expect(env.Client.Get(s.Ctx, client.ObjectKeyFromObject(claim), claim)).To(Succeed())
		return claim.Status.NodeName
	}).Should(Equal(claim.Name))
	g.Expect(claim.Status.ProviderID).To(Equal("kubemark://" + claim.Name))
	g.Eventually(func() error {
		var node corev1.Node
		if err := env.Client.Get(s.Ctx, client.ObjectKey{Name: claim.Name}, &node); err != nil {
			return err
		}
		patch := client.MergeFromWithOptions(node.DeepCopy(), client.MergeFromWithOptimisticLock{})
		node.Spec.Taints = slices.DeleteFunc(node.Spec.Taints, func(taint corev1.Taint) bool { return taint.Key == "example.com/agent-not-ready" })
		return env.Client.Patch(s.Ctx, &node, patch)
	}).Should(Succeed())
	g.Eventually(s.ReadyClaims).Should(Equal(1))

	// The token is revoked once the node registered. Were it still there
	// (a revocation that failed, a restored backup), its request for its
	// own node would be denied: the node has registered.
	g.Eventually(func() bool {
		return apierrors.IsNotFound(env.Client.Get(s.Ctx, client.ObjectKeyFromObject(&tokenSecret), &corev1.Secret{}))
	}).Should(BeTrue())
	revived := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: tokenSecret.Namespace, Name: tokenSecret.Name, Labels: tokenSecret.Labels, OwnerReferences: tokenSecret.OwnerReferences},
		Type:       tokenSecret.Type, Data: tokenSecret.Data,
	}
	g.Expect(env.Client.Create(s.Ctx, revived)).To(Succeed())
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), revived) })
	again := harness.SubmitCSR(g, join.token, s.Name+"-again", "system:node:"+claim.Name)
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), again) })
	g.Eventually(func() string { return harness.DecisionOf(g, again.Name) }).Should(Equal("Denied/" + csrapproval.ReasonDenied))
	g.Eventually(func() []string { return harness.EventsOf(g, "NodeClaim", claim.Name) }).Should(ContainElement(
		And(HavePrefix(csrapproval.EventDenied+":"), ContainSubstring(again.Name), ContainSubstring("already has its node"))))
	g.Expect(env.Client.Delete(s.Ctx, revived)).To(Succeed())
}

// compareWithTemplate checks the Node as the kubelet registered it against
// the template node the claim was simulated with.
func compareWithTemplate(t *testing.T, g *WithT, pool *v1alpha1.NodePool, claim *v1alpha1.NodeClaim, registered *corev1.Node) {
	t.Helper()
	template, err := scheduling.TemplateNode(pool, scheduling.Shape{Name: claim.Spec.Shape.Name, CPU: claim.Spec.Shape.CPU, Memory: claim.Spec.Shape.Memory}, "", claim.Name)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(registered.Spec.ProviderID).To(Equal("kubemark://" + claim.Name))
	for key, value := range template.Labels {
		g.Expect(registered.Labels).To(HaveKeyWithValue(key, value), "the kubelet registered the template node's label %s", key)
	}
	var extra []string
	for key := range registered.Labels {
		if _, ok := template.Labels[key]; !ok {
			extra = append(extra, key)
		}
	}
	sort.Strings(extra)
	// The kubelet's own deprecated twins of kubernetes.io/os and arch.
	g.Expect(extra).To(BeElementOf([]string{}, nil, []string{"beta.kubernetes.io/arch", "beta.kubernetes.io/os"}), "labels the template node lacks")
	wantTaints := slices.Concat(template.Spec.Taints, pool.Spec.Template.StartupTaints,
		[]corev1.Taint{{Key: v1alpha1.TaintUnregistered, Effect: corev1.TaintEffectNoSchedule}})
	g.Expect(registered.Spec.Taints).To(ConsistOf(wantTaints), "the kubelet registered the template's taints, the startup taints and the unregistered taint")
	// Capacity and allocatable come with the registration or the first
	// status update.
	node := registered
	g.Eventually(func() corev1.ResourceList {
		if len(node.Status.Allocatable) == 0 {
			node = &corev1.Node{}
			g.Expect(env.Client.Get(context.Background(), client.ObjectKeyFromObject(registered), node)).To(Succeed())
		}
		return node.Status.Allocatable
	}).ShouldNot(BeEmpty())
	for _, name := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory, corev1.ResourcePods} {
		got, want := node.Status.Capacity[name], template.Status.Capacity[name]
		g.Expect(got.Cmp(want)).To(BeZero(), "capacity %s: the kubelet reports %s, the template node has %s", name, got.String(), want.String())
	}
	for _, name := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourcePods} {
		got, want := node.Status.Allocatable[name], template.Status.Allocatable[name]
		g.Expect(got.Cmp(want)).To(BeZero(), "allocatable %s: the kubelet reports %s, the template node has %s", name, got.String(), want.String())
	}
	// kubemark runs the kubelet with a stub container manager
	// (cm.NewStubContainerManager), which reserves nothing: its allocatable
	// memory is its capacity, where a real kubelet subtracts its default
	// hard eviction threshold (memory.available<100Mi), as the template
	// node does.
	got, capacity, want := node.Status.Allocatable[corev1.ResourceMemory], node.Status.Capacity[corev1.ResourceMemory], template.Status.Allocatable[corev1.ResourceMemory]
	g.Expect(got.Cmp(capacity)).To(BeZero(), "the hollow kubelet reserves no memory")
	capacity.Sub(resource.MustParse("100Mi"))
	g.Expect(want.Cmp(capacity)).To(BeZero(), "the template node's allocatable memory is capacity less the kubelet's default eviction threshold")
	t.Logf("registered node %s: labels %v, taints %v, capacity %v, allocatable %v",
		node.Name, node.Labels, node.Spec.Taints, resourceString(node.Status.Capacity), resourceString(node.Status.Allocatable))
}

func resourceString(list corev1.ResourceList) string {
	var parts []string
	for _, name := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory, corev1.ResourcePods, corev1.ResourceEphemeralStorage} {
		if q, ok := list[name]; ok {
			parts = append(parts, string(name)+"="+q.String())
		}
	}
	return strings.Join(parts, ",")
}

// joinData is what a machine reads from its user data to join.
type joinData struct {
	endpoint string
	token    string
	caPEM    []byte
	nodeName string
	// kubeletArgs are the kubelet flags, without dashes.
	kubeletArgs map[string]string
}

// parseJoin reads the rendered user data as kubeadm join or the k3s
// agent would, and finds the CA as they do: kubeadm from kube-public's
// cluster-info, pinned by the user data's CA hashes; the k3s agent from the
// server, pinned by the hash in its K10 token.
func parseJoin(t *testing.T, method v1alpha1.JoinMethod, userData []byte) joinData {
	t.Helper()
	g := NewWithT(t)
	var cloudConfig struct {
		WriteFiles []struct {
			Path    string `json:"path"`
			Content string `json:"content"`
		} `json:"write_files"`
	}
	g.Expect(yaml.Unmarshal(userData, &cloudConfig)).To(Succeed())
	g.Expect(cloudConfig.WriteFiles).To(HaveLen(1))
	content := []byte(cloudConfig.WriteFiles[0].Content)

	var info corev1.ConfigMap
	g.Expect(env.Client.Get(context.Background(), client.ObjectKey{Namespace: "kube-public", Name: "cluster-info"}, &info)).To(Succeed())
	kubeconfig, err := clientcmd.Load([]byte(info.Data["kubeconfig"]))
	g.Expect(err).NotTo(HaveOccurred())
	var caPEM []byte
	for _, cluster := range kubeconfig.Clusters {
		caPEM = cluster.CertificateAuthorityData
	}
	certs, err := certutil.ParseCertsPEM(caPEM)
	g.Expect(err).NotTo(HaveOccurred())

	join := joinData{caPEM: caPEM, kubeletArgs: map[string]string{}}
	switch method {
	case v1alpha1.JoinKubeadm:
		var config struct {
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
				Name string `json:"name"`
				// Empty: the taints go to the kubelet as
				// --register-with-taints among the extra args.
				Taints           []corev1.Taint `json:"taints"`
				KubeletExtraArgs []struct {
					Name  string `json:"name"`
					Value string `json:"value"`
				} `json:"kubeletExtraArgs"`
			} `json:"nodeRegistration"`
		}
		g.Expect(yaml.UnmarshalStrict(content, &config)).To(Succeed())
		g.Expect(config.APIVersion + "/" + config.Kind).To(Equal("kubeadm.k8s.io/v1beta4/JoinConfiguration"))
		g.Expect(config.NodeRegistration.Taints).To(BeEmpty())
		discovery := config.Discovery.BootstrapToken
		g.Expect(discovery.CACertHashes).To(ContainElements(bootstrap.CACertHashes(certs)), "the CA kubeadm discovers is the one the user data pins")
		join.endpoint, join.token, join.nodeName = discovery.APIServerEndpoint, discovery.Token, config.NodeRegistration.Name
		for _, arg := range config.NodeRegistration.KubeletExtraArgs {
			join.kubeletArgs[arg.Name] = arg.Value
		}
	case v1alpha1.JoinK3s:
		var config struct {
			Server     string   `json:"server"`
			Token      string   `json:"token"`
			NodeName   string   `json:"node-name"`
			NodeLabel  []string `json:"node-label"`
			NodeTaint  []string `json:"node-taint"`
			KubeletArg []string `json:"kubelet-arg"`
		}
		g.Expect(yaml.UnmarshalStrict(content, &config)).To(Succeed())
		hash, token, found := strings.Cut(strings.TrimPrefix(config.Token, "K10"), "::")
		g.Expect(found).To(BeTrue(), "a k3s secure token")
		sum := sha256.Sum256(caPEM)
		g.Expect(hash).To(Equal(hex.EncodeToString(sum[:])), "the CA the k3s agent fetches is the one its token pins")
		join.endpoint, join.token, join.nodeName = strings.TrimPrefix(config.Server, "https://"), token, config.NodeName
		// k3s hands node-label and node-taint to the kubelet as
		// --node-labels and --register-with-taints, and kubelet-arg as is.
		if len(config.NodeLabel) > 0 {
			join.kubeletArgs["node-labels"] = strings.Join(config.NodeLabel, ",")
		}
		if len(config.NodeTaint) > 0 {
			join.kubeletArgs["register-with-taints"] = strings.Join(config.NodeTaint, ",")
		}
		for _, arg := range config.KubeletArg {
			name, value, _ := strings.Cut(arg, "=")
			join.kubeletArgs[name] = value
		}
	}
	return join
}

// bootHollowNode starts kubemark's hollow kubelet as the machine's
// kubelet: the bootstrap kubeconfig made from the user data, and its
// kubelet flags. It returns a function that stops it.
func bootHollowNode(t *testing.T, kubemark string, join joinData) (stop func()) {
	t.Helper()
	g := NewWithT(t)
	dir := t.TempDir()
	bootstrapKubeconfig := filepath.Join(dir, "bootstrap-kubeconfig")
	g.Expect(clientcmd.WriteToFile(clientcmdapi.Config{
		Clusters:       map[string]*clientcmdapi.Cluster{"cluster": {Server: "https://" + join.endpoint, CertificateAuthorityData: join.caPEM}},
		AuthInfos:      map[string]*clientcmdapi.AuthInfo{"bootstrap": {Token: join.token}},
		Contexts:       map[string]*clientcmdapi.Context{"bootstrap": {Cluster: "cluster", AuthInfo: "bootstrap"}},
		CurrentContext: "bootstrap",
	}, bootstrapKubeconfig)).To(Succeed())
	port, err := testenv.FreePort()
	g.Expect(err).NotTo(HaveOccurred())
	args := []string{
		"--morph=kubelet",
		"--name=" + join.nodeName,
		"--bootstrap-kubeconfig=" + bootstrapKubeconfig,
		"--kubeconfig=" + filepath.Join(dir, "kubeconfig"),
		"--cert-dir=" + filepath.Join(dir, "pki"),
		"--kubelet-port=" + strconv.Itoa(port),
		"--kubelet-read-only-port=0",
		// No container runtime's image service on this machine: the fake one.
		"--use-host-image-service=false",
	}
	for _, name := range slices.Sorted(maps.Keys(join.kubeletArgs)) {
		args = append(args, "--"+name+"="+join.kubeletArgs[name])
	}
	logs := &harness.LockedBuffer{}
	cmd := exec.Command(kubemark, args...)
	cmd.Stdout, cmd.Stderr = logs, logs
	// kubemark makes its root and pod directories under TMPDIR.
	cmd.Env = append(os.Environ(), "TMPDIR="+dir)
	g.Expect(cmd.Start()).To(Succeed())
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			_ = cmd.Process.Signal(os.Interrupt)
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				_ = cmd.Process.Kill()
				<-done
			}
		})
	}
	t.Cleanup(func() {
		stop()
		if t.Failed() {
			t.Logf("kubemark %s, last lines:\n%s", strings.Join(args, " "), lastLines(logs.String(), 60))
		}
	})
	return stop
}

func lastLines(text string, n int) string {
	var lines []string
	scanner := bufio.NewScanner(bytes.NewReader([]byte(text)))
	scanner.Buffer(make([]byte, 1<<20), 1<<20)
	for scanner.Scan() {
		lines = append(lines, scanner.Text())
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// hollowMachines is a provider whose machines are hollow nodes the test
// boots: Create keeps the user data claimscale rendered; Delete stops the
// machine's kubelet, as powering off a VM would.
type hollowMachines struct {
	mu       sync.Mutex
	machines map[string]*hollowMachine
}

type hollowMachine struct {
	instance *provider.Instance
	userData []byte
	stop     func()
}

var _ provider.Provider = (*hollowMachines)(nil)

func (h *hollowMachines) Create(_ context.Context, claim *v1alpha1.NodeClaim, opts provider.CreateOptions) (*provider.Instance, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if m, ok := h.machines[claim.Name]; ok {
		return m.instance, nil
	}
	m := &hollowMachine{
		instance: &provider.Instance{
			ProviderID: "kubemark://" + claim.Name, Name: claim.Name,
			Capacity: corev1.ResourceList{corev1.ResourceCPU: claim.Spec.Shape.CPU, corev1.ResourceMemory: claim.Spec.Shape.Memory},
			Tags:     provider.Tags(harness.ClusterName, claim), State: provider.InstanceRunning, CreatedAt: time.Now(),
		},
		userData: opts.UserData,
	}
	h.machines[claim.Name] = m
	return m.instance, nil
}

func (h *hollowMachines) Delete(_ context.Context, providerID string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	for name, m := range h.machines {
		if m.instance.ProviderID == providerID {
			if m.stop != nil {
				m.stop()
			}
			delete(h.machines, name)
		}
	}
	return nil
}

func (h *hollowMachines) Get(_ context.Context, providerID string) (*provider.Instance, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, m := range h.machines {
		if m.instance.ProviderID == providerID {
			return m.instance, nil
		}
	}
	return nil, provider.NewNotFound("hollow machine %s", providerID)
}

func (h *hollowMachines) List(context.Context) ([]*provider.Instance, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	var list []*provider.Instance
	for _, m := range h.machines {
		list = append(list, m.instance)
	}
	return list, nil
}

func (h *hollowMachines) Shapes(_ context.Context, pool *v1alpha1.NodePool) ([]provider.Shape, error) {
	var shapes []provider.Shape
	for _, shape := range pool.Spec.Shapes.Fixed {
		if shape.CPU == nil || shape.Memory == nil {
			return nil, provider.NewTerminal(fmt.Errorf("shape %s needs cpu and memory", shape.Name))
		}
		shapes = append(shapes, provider.Shape{Name: shape.Name, Capacity: corev1.ResourceList{
			corev1.ResourceCPU: *shape.CPU, corev1.ResourceMemory: *shape.Memory,
		}})
	}
	return shapes, nil
}

func (h *hollowMachines) userData(claimName string) []byte {
	h.mu.Lock()
	defer h.mu.Unlock()
	if m, ok := h.machines[claimName]; ok {
		return m.userData
	}
	return nil
}

// boot records the running kubelet of the claim's machine, for Delete to
// stop.
func (h *hollowMachines) boot(t *testing.T, claimName string, stop func()) {
	h.mu.Lock()
	defer h.mu.Unlock()
	m, ok := h.machines[claimName]
	if !ok {
		stop()
		t.Fatalf("no machine for claim %s", claimName)
	}
	m.stop = stop
}
