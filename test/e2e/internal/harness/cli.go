package harness

import (
	"bytes"
	"context"
	"io"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/internal/kubectlplugin"
)

// ClaimscaleCLI runs `kubectl claimscale` in this process against the
// in-process controller's endpoint, as a user bound to the decisions
// reader role (the chart's <release>-decisions-reader) with a token.
type ClaimscaleCLI struct {
	// Endpoint is the controller's decisions endpoint (https://host:port);
	// a test that starts the controller again elsewhere points it there.
	Endpoint   string
	kubeconfig string
}

// NewClaimscaleCLI is the command as a cluster-admin.
func NewClaimscaleCLI(ctx context.Context, t *testing.T, endpoint string) *ClaimscaleCLI {
	t.Helper()
	return NewClaimscaleCLIAs(ctx, t, endpoint, "cluster-admin")
}

// NewClaimscaleCLIAs is NewClaimscaleCLI for a user who is bound to
// clusterRole instead of cluster-admin, besides the decisions reader role.
func NewClaimscaleCLIAs(ctx context.Context, t *testing.T, endpoint, clusterRole string) *ClaimscaleCLI {
	t.Helper()
	clientset, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	account := "decisions-reader-" + strings.ToLower(strings.ReplaceAll(t.Name(), "_", "-"))
	if clusterRole != "cluster-admin" {
		account = strings.ReplaceAll(clusterRole, ":", "-") + "-" + strings.ToLower(strings.ReplaceAll(t.Name(), "_", "-"))
	}
	if len(account) > 60 {
		account = strings.TrimRight(account[:60], "-")
	}
	token := ServiceAccountToken(ctx, t, clientset, account)
	role := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: account},
		Rules:      []rbacv1.PolicyRule{{NonResourceURLs: []string{"/decisions", "/decisions/*"}, Verbs: []string{"get"}}},
	}
	GrantClusterRole(ctx, t, role, account)
	kubeconfig := clientcmdapi.NewConfig()
	kubeconfig.Clusters["e2e"] = &clientcmdapi.Cluster{Server: env.Config.Host, CertificateAuthorityData: env.Config.CAData}
	kubeconfig.AuthInfos["reader"] = &clientcmdapi.AuthInfo{Token: token}
	kubeconfig.Contexts["e2e"] = &clientcmdapi.Context{Cluster: "e2e", AuthInfo: "reader", Namespace: "default"}
	kubeconfig.CurrentContext = "e2e"
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*kubeconfig, path); err != nil {
		t.Fatal(err)
	}
	// get and simulate list nodes, pods, DaemonSets and claimscale.io
	// objects with the caller's credentials; by default an
	// administrator's.
	viewer := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: account + "-view"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: clusterRole},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: account, Namespace: ControllerNamespace}},
	}
	if err := env.Client.Create(ctx, viewer); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), viewer) })
	return &ClaimscaleCLI{Endpoint: "https://" + endpoint, kubeconfig: path}
}

// Run returns what the command printed, and its error.
func (c *ClaimscaleCLI) Run(args ...string) (string, error) {
	return c.RunWithInput("", args...)
}

// RunWithInput runs the command with stdin.
func (c *ClaimscaleCLI) RunWithInput(stdin string, args ...string) (string, error) {
	var out bytes.Buffer
	err := c.RunContext(context.Background(), strings.NewReader(stdin), &out, args...)
	return out.String(), err
}

// RunContext runs the command until it ends or ctx does, printing to out.
func (c *ClaimscaleCLI) RunContext(ctx context.Context, in io.Reader, out io.Writer, args ...string) error {
	var errOut bytes.Buffer
	cmd := kubectlplugin.NewCommand(genericiooptions.IOStreams{In: in, Out: out, ErrOut: &errOut})
	cmd.SetArgs(append(args, "--kubeconfig", c.kubeconfig, "--endpoint", c.Endpoint, "--insecure-skip-endpoint-verify"))
	return cmd.ExecuteContext(ctx)
}

// Why runs `why`, failing the poll (not the test) on an error: the
// decision may not be taken yet.
func (c *ClaimscaleCLI) Why(g Gomega, args ...string) string {
	out, err := c.Run(append([]string{"why"}, args...)...)
	g.Expect(err).NotTo(HaveOccurred())
	return out
}

// SimulatedNodes reads simulate's table: count per shape of one pool.
func SimulatedNodes(out, pool string) map[string]int {
	counts := map[string]int{}
	for _, line := range strings.Split(out, "\n") {
		fields := strings.Fields(line)
		if len(fields) == 5 && fields[0] == pool {
			n, err := strconv.Atoi(fields[3])
			if err == nil {
				counts[fields[1]] += n
			}
		}
	}
	return counts
}

// ResourceVersions of every object of every kind a simulation reads, and
// of the controller's machines, keyed by kind, namespace and name: a
// simulation that wrote nothing leaves them as they were.
func (s *Scenario) ResourceVersions() map[string]string {
	versions := map[string]string{}
	for kind, list := range map[string]client.ObjectList{
		"Pod": &corev1.PodList{}, "Node": &corev1.NodeList{}, "Namespace": &corev1.NamespaceList{},
		"ConfigMap": &corev1.ConfigMapList{}, "Deployment": &appsv1.DeploymentList{}, "DaemonSet": &appsv1.DaemonSetList{},
		"ReplicaSet": &appsv1.ReplicaSetList{}, "PodDisruptionBudget": &policyv1.PodDisruptionBudgetList{},
		"NodePool": &v1alpha1.NodePoolList{}, "NodeClaim": &v1alpha1.NodeClaimList{}, "NodeProvider": &v1alpha1.NodeProviderList{},
	} {
		s.G.Expect(env.Client.List(s.Ctx, list)).To(Succeed())
		items, err := meta.ExtractList(list)
		s.G.Expect(err).NotTo(HaveOccurred())
		for _, item := range items {
			object := item.(client.Object)
			// Only what this scenario owns: other objects (kwok's node
			// heartbeats, leases) change on their own.
			if object.GetNamespace() != s.Namespace && object.GetNamespace() != ControllerNamespace &&
				object.GetName() != s.Name && object.GetName() != s.Namespace && object.GetLabels()[v1alpha1.LabelNodePool] != s.Name {
				continue
			}
			versions[kind+" "+object.GetNamespace()+"/"+object.GetName()] = object.GetResourceVersion()
		}
	}
	return versions
}
