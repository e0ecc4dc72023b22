package cloudscale_test

import (
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/pkg/provider"
	cs "github.com/claimscale/claimscale/pkg/provider/cloudscale"
	"github.com/claimscale/claimscale/pkg/provider/cloudscale/cloudscaletest"
)

// TestTheDocsExampleIsValid decodes the complete example of
// docs/cloudscale.md strictly (an unknown or misspelt field fails) and runs
// it against the fake API, so the documentation cannot drift from the CRDs.
func TestTheDocsExampleIsValid(t *testing.T) {
	g := NewWithT(t)
	raw, err := os.ReadFile("../../../docs/cloudscale.md")
	g.Expect(err).NotTo(HaveOccurred())
	_, after, found := strings.Cut(string(raw), "<!-- example: complete -->\n```yaml\n")
	g.Expect(found).To(BeTrue(), "the example marker is in the doc")
	block, _, found := strings.Cut(after, "\n```")
	g.Expect(found).To(BeTrue())

	var (
		np      v1alpha1.NodeProvider
		pool    v1alpha1.NodePool
		secrets = map[string]corev1.Secret{}
	)
	for _, doc := range strings.Split(block, "\n---\n") {
		var meta struct{ Kind string }
		g.Expect(yaml.Unmarshal([]byte(doc), &meta)).To(Succeed())
		var obj any
		switch meta.Kind {
		case "Secret":
			var s corev1.Secret
			g.Expect(yaml.UnmarshalStrict([]byte(doc), &s)).To(Succeed())
			secrets[s.Namespace+"/"+s.Name] = s
			obj = &s
		case "NodeProvider":
			g.Expect(yaml.UnmarshalStrict([]byte(doc), &np)).To(Succeed())
			obj = &np
		case "NodePool":
			g.Expect(yaml.UnmarshalStrict([]byte(doc), &pool)).To(Succeed())
			obj = &pool
		default:
			t.Fatalf("unexpected kind %q in the example", meta.Kind)
		}
		// Strict decoding matches field names without regard to case; the
		// API server does not. Every key written must come back out as is.
		var written, decoded any
		g.Expect(yaml.Unmarshal([]byte(doc), &written)).To(Succeed())
		out, err := yaml.Marshal(obj)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(yaml.Unmarshal(out, &decoded)).To(Succeed())
		g.Expect(missingKeys("", written, decoded)).To(BeEmpty(), "fields of the %s in the example", meta.Kind)
	}
	g.Expect(pool.Spec.ProviderRef.Name).To(Equal(np.Name))

	credsRef := np.Spec.CredentialsSecretRef
	creds, ok := secrets[credsRef.Namespace+"/"+credsRef.Name]
	g.Expect(ok).To(BeTrue(), "the credentials Secret is in the example")
	token := creds.StringData[cs.CredentialToken]
	api := cloudscaletest.NewServer(cloudscaletest.WithToken(token))
	defer api.Close()
	for _, zone := range np.Spec.Cloudscale.Zones {
		for _, group := range zone.ServerGroups {
			api.AddServerGroup(cloudscaletest.ServerGroupSpec{UUID: group, Name: "docs-" + zone.Name, Zone: zone.Name})
		}
	}

	store := secretStore{}
	for _, s := range secrets {
		for k, v := range s.StringData {
			store[s.Namespace+"/"+s.Name+"/"+k] = []byte(v)
		}
	}
	p, err := cs.New(t.Context(), &np, provider.Options{
		ClusterName: testCluster,
		Credentials: map[string][]byte{cs.CredentialToken: []byte(token), cs.CredentialAPIURL: []byte(api.URL)},
		Secrets:     store,
	})
	g.Expect(err).NotTo(HaveOccurred())

	shapes, err := p.Shapes(t.Context(), &pool)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(shapes).To(HaveLen(len(pool.Spec.Shapes.Fixed)))

	_, err = p.Create(t.Context(), claim("cloudscale-flex-x7k2p", pool.Name, shapes[0].Name), provider.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	body := postBodies(t, api)[0]
	ref := np.Spec.Cloudscale.UserDataSecretRef
	g.Expect(body).To(HaveKeyWithValue("user_data", string(store[ref.Namespace+"/"+ref.Name+"/"+ref.Key])))
	g.Expect(body).To(HaveKeyWithValue("zone", "lpg1"))
	g.Expect(body).To(HaveKeyWithValue("interfaces", HaveLen(3)))

	// The second zone's own network and server group.
	inRMA1 := claim("cloudscale-flex-r2d2x", pool.Name, shapes[0].Name)
	inRMA1.Spec.Requirements.NodeSelector = []corev1.NodeSelectorRequirement{{Key: corev1.LabelTopologyZone, Operator: corev1.NodeSelectorOpIn, Values: []string{"rma1"}}}
	_, err = p.Create(t.Context(), inRMA1, provider.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	body = postBodies(t, api)[1]
	g.Expect(body).To(HaveKeyWithValue("zone", "rma1"))
	g.Expect(body).To(HaveKeyWithValue("interfaces", HaveLen(2)))
	g.Expect(body).To(HaveKeyWithValue("server_groups", ContainElement(np.Spec.Cloudscale.Zones[1].ServerGroups[0])))
	g.Expect(body).To(HaveKeyWithValue("server_groups", HaveLen(2)), "the zone's listed group and a managed one")
	g.Expect(api.CountRequests(http.MethodPost, "/v1/servers")).To(Equal(2))
}

// missingKeys lists the map keys of written that decoded lacks, by path.
func missingKeys(path string, written, decoded any) []string {
	var missing []string
	switch w := written.(type) {
	case map[string]any:
		d, _ := decoded.(map[string]any)
		for k, v := range w {
			dv, ok := d[k]
			if !ok {
				missing = append(missing, path+"."+k)
				continue
			}
			missing = append(missing, missingKeys(path+"."+k, v, dv)...)
		}
	case []any:
		d, _ := decoded.([]any)
		for i, v := range w {
			if i >= len(d) {
				missing = append(missing, fmt.Sprintf("%s[%d]", path, i))
				continue
			}
			missing = append(missing, missingKeys(fmt.Sprintf("%s[%d]", path, i), v, d[i])...)
		}
	}
	return missing
}
