package bootstrap

import (
	"bytes"
	"crypto/sha256"
	"crypto/x509"
	"embed"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"text/template"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/internal/scheduling"
)

//go:embed templates/*.yaml
var builtIn embed.FS

// DefaultTemplate returns the built-in user-data template of a join method;
// custom has none.
func DefaultTemplate(method v1alpha1.JoinMethod) (string, error) {
	switch method {
	case v1alpha1.JoinKubeadm, v1alpha1.JoinK3s:
		b, err := builtIn.ReadFile("templates/" + string(method) + ".yaml")
		return string(b), err
	}
	return "", fmt.Errorf("join method %q has no built-in user-data template: set userDataTemplateRef", method)
}

// Data is what a user-data template sees.
type Data struct {
	// Method is the pool's join method.
	Method v1alpha1.JoinMethod
	// NodeName the machine registers as (the claim's name).
	NodeName string
	// Pool, Shape, Zone: where the machine comes from. Zone is empty unless
	// the claim asks for exactly one.
	Pool, Shape, Zone string

	// APIServerEndpoint is host:port; APIServerURL is https://host:port.
	APIServerEndpoint string
	APIServerURL      string
	// CACertHashes are kubeadm's --discovery-token-ca-cert-hash values:
	// "sha256:" and the hex SHA-256 of each CA certificate's
	// SubjectPublicKeyInfo.
	CACertHashes []string
	// CACertificate is the CA bundle, PEM.
	CACertificate string

	// Token is the join credential: the claim's bootstrap token
	// (<id>.<secret>) or, with TokenShared, the pool's shared token.
	Token string
	// TokenID is the bootstrap token's public id; empty when shared.
	TokenID string
	// TokenExpiresAt is RFC 3339; empty when shared.
	TokenExpiresAt string
	// TokenShared says Token is the pool's shared token, not a per-claim one.
	TokenShared bool
	// K3sToken is Token in k3s's secure format,
	// K10<sha256 of the CA bundle PEM>::<Token>, for tokens that are not
	// already in that format.
	K3sToken string

	// Labels the node registers with: exactly the template node's.
	Labels map[string]string
	// NodeLabels are Labels as key=value, sorted.
	NodeLabels []string
	// NodeTaints are the pool's taints and startup taints, and
	// claimscale's unregistered taint, as key[=value]:Effect, the
	// kubelet's --register-with-taints syntax.
	NodeTaints []string
	// Kubelet is the pool's kubelet settings as flag values.
	Kubelet KubeletFlags
	// KubeletArgs are every kubelet flag to set (without leading dashes):
	// node-labels, register-with-taints when there are taints, max-pods,
	// and the reservations and eviction thresholds the pool sets.
	KubeletArgs []Arg
}

// KubeletFlags are kubelet flag values; empty means "not set".
type KubeletFlags struct {
	MaxPods        string
	KubeReserved   string
	SystemReserved string
	EvictionHard   string
}

// Arg is one flag.
type Arg struct{ Name, Value string }

// Input is what Render needs besides the template.
type Input struct {
	Pool    *v1alpha1.NodePool
	Claim   *v1alpha1.NodeClaim
	Cluster ClusterInfo
	// Token is the per-claim token; Shared the shared token's value when
	// the pool uses one (then Token is ignored).
	Token  Token
	Shared string
}

// NewData computes the template's data. Labels, taints and kubelet settings
// come from scheduling.TemplateNode and the pool's kubelet settings, the
// same inputs the simulation used, so what registers is what was simulated.
func NewData(in Input) (*Data, error) {
	pool, claim := in.Pool, in.Claim
	zone := requiredZone(claim)
	node, err := scheduling.TemplateNode(pool, scheduling.Shape{
		Name: claim.Spec.Shape.Name, CPU: claim.Spec.Shape.CPU, Memory: claim.Spec.Shape.Memory,
		ExtendedResources: claim.Spec.Shape.ExtendedResources,
	}, zone, claim.Name)
	if err != nil {
		return nil, fmt.Errorf("building the template node of claim %s: %w", claim.Name, err)
	}
	d := &Data{
		Method:            pool.Spec.Template.Bootstrap.Method,
		NodeName:          claim.Name,
		Pool:              pool.Name,
		Shape:             claim.Spec.Shape.Name,
		Zone:              zone,
		APIServerEndpoint: in.Cluster.Endpoint,
		APIServerURL:      "https://" + in.Cluster.Endpoint,
		CACertHashes:      CACertHashes(in.Cluster.CACertificates),
		CACertificate:     string(in.Cluster.CAPEM),
		Labels:            node.Labels,
		NodeLabels:        keyValues(node.Labels),
	}
	if in.Shared != "" {
		d.Token, d.TokenShared = in.Shared, true
	} else {
		d.Token, d.TokenID, d.TokenExpiresAt = in.Token.String(), in.Token.ID, in.Token.ExpiresAt.UTC().Format(time.RFC3339)
	}
	d.K3sToken = d.Token
	if !strings.HasPrefix(d.Token, "K10") {
		sum := sha256.Sum256(in.Cluster.CAPEM)
		d.K3sToken = "K10" + hex.EncodeToString(sum[:]) + "::" + d.Token
	}
	// Registration takes the unregistered taint off once it has nominated
	// the pods the node was bought for (v1alpha1.TaintUnregistered).
	unregistered := corev1.Taint{Key: v1alpha1.TaintUnregistered, Effect: corev1.TaintEffectNoSchedule}
	for _, taint := range slices.Concat(node.Spec.Taints, pool.Spec.Template.StartupTaints, []corev1.Taint{unregistered}) {
		d.NodeTaints = append(d.NodeTaints, taintFlag(taint))
	}
	kubelet := pool.Spec.Template.Kubelet
	d.Kubelet = KubeletFlags{
		MaxPods:        node.Status.Capacity.Pods().String(),
		KubeReserved:   resourceFlag(kubelet.KubeReserved),
		SystemReserved: resourceFlag(kubelet.SystemReserved),
		EvictionHard:   evictionFlag(kubelet.EvictionHard),
	}
	d.KubeletArgs = []Arg{{"node-labels", strings.Join(d.NodeLabels, ",")}}
	for _, arg := range []Arg{
		{"register-with-taints", strings.Join(d.NodeTaints, ",")},
		{"max-pods", d.Kubelet.MaxPods},
		{"kube-reserved", d.Kubelet.KubeReserved},
		{"system-reserved", d.Kubelet.SystemReserved},
		{"eviction-hard", d.Kubelet.EvictionHard},
	} {
		if arg.Value != "" {
			d.KubeletArgs = append(d.KubeletArgs, arg)
		}
	}
	return d, nil
}

// Render executes a user-data template. Errors name the template and the
// failing action, never the data.
func Render(name, text string, data *Data) ([]byte, error) {
	tmpl, err := template.New(name).Option("missingkey=error").Funcs(template.FuncMap{
		"quote": quote,
		"join":  strings.Join,
	}).Parse(text)
	if err != nil {
		return nil, fmt.Errorf("parsing user-data template %s: %w", name, err)
	}
	var out bytes.Buffer
	if err := tmpl.Execute(&out, data); err != nil {
		return nil, fmt.Errorf("rendering user-data template %s: %w", name, err)
	}
	return out.Bytes(), nil
}

// CACertHashes returns kubeadm's public key pins of the certificates:
// "sha256:" + hex(SHA-256(SubjectPublicKeyInfo)), as kubeadm's
// --discovery-token-ca-cert-hash (cmd/kubeadm/app/util/pubkeypin).
func CACertHashes(certs []*x509.Certificate) []string {
	hashes := make([]string, 0, len(certs))
	for _, cert := range certs {
		sum := sha256.Sum256(cert.RawSubjectPublicKeyInfo)
		hashes = append(hashes, "sha256:"+hex.EncodeToString(sum[:]))
	}
	return hashes
}

// requiredZone is the zone a claim asks for when it names exactly one.
func requiredZone(claim *v1alpha1.NodeClaim) string {
	for _, r := range claim.Spec.Requirements.NodeSelector {
		if r.Key == corev1.LabelTopologyZone && r.Operator == corev1.NodeSelectorOpIn && len(r.Values) == 1 {
			return r.Values[0]
		}
	}
	return ""
}

func keyValues(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k, v := range m {
		out = append(out, k+"="+v)
	}
	slices.Sort(out)
	return out
}

// taintFlag writes a taint as the kubelet's --register-with-taints reads
// it: key[=value]:Effect.
func taintFlag(t corev1.Taint) string {
	if t.Value == "" {
		return t.Key + ":" + string(t.Effect)
	}
	return t.Key + "=" + t.Value + ":" + string(t.Effect)
}

// resourceFlag writes reserved resources as cpu=100m,memory=256Mi, sorted.
func resourceFlag(list corev1.ResourceList) string {
	out := make([]string, 0, len(list))
	for name, q := range list {
		out = append(out, string(name)+"="+q.String())
	}
	slices.Sort(out)
	return strings.Join(out, ",")
}

// evictionFlag writes hard eviction thresholds as memory.available<100Mi,
// sorted: the kubelet's --eviction-hard syntax.
func evictionFlag(thresholds map[string]v1alpha1.EvictionThreshold) string {
	out := make([]string, 0, len(thresholds))
	for signal, v := range thresholds {
		out = append(out, signal+"<"+string(v))
	}
	slices.Sort(out)
	return strings.Join(out, ",")
}

// quote writes s as a double-quoted YAML (JSON) string.
func quote(s string) string {
	b, err := json.Marshal(s)
	if err != nil {
		return strconv.Quote(s)
	}
	return string(b)
}
