package proxmox

import (
	"context"
	"os"
	"regexp"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/claimscale/claimscale/api/v1alpha1"
)

// TestDocumentedManifestsAreValid decodes every manifest in
// docs/proxmox.md strictly into the API types, so that a field the CRDs do
// not have fails here, and reads the settings and shapes as the provider
// would.
func TestDocumentedManifestsAreValid(t *testing.T) {
	doc, err := os.ReadFile("../../../docs/proxmox.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := regexp.MustCompile("(?s)```yaml\n(.*?)```").FindAllStringSubmatch(string(doc), -1)
	kinds := map[string]int{}
	// providers are the documented NodeProviders' settings, for the
	// shapes of the pools that name them.
	providers := map[string]*settings{}
	var pools []v1alpha1.NodePool
	for _, block := range blocks {
		for _, manifest := range strings.Split(block[1], "\n---\n") {
			if !strings.Contains(manifest, "apiVersion:") {
				continue
			}
			var meta struct{ APIVersion, Kind string }
			if err := yaml.Unmarshal([]byte(manifest), &meta); err != nil {
				t.Fatalf("manifest does not parse: %v\n%s", err, manifest)
			}
			if meta.APIVersion == "" {
				continue // a cloud-config snippet that embeds a kubeadm manifest
			}
			kinds[meta.Kind]++
			switch meta.Kind {
			case "Secret":
				var s corev1.Secret
				if err := yaml.UnmarshalStrict([]byte(manifest), &s); err != nil {
					t.Errorf("Secret: %v", err)
				}
				data := map[string][]byte{}
				for k, v := range s.StringData {
					if k != SecretKeyCA { // a placeholder in the docs
						data[k] = []byte(v)
					}
				}
				if _, err := parseCredentials(data); err != nil {
					t.Errorf("Secret %s: %v", s.Name, err)
				}
			case "NodeProvider":
				var np v1alpha1.NodeProvider
				if err := yaml.UnmarshalStrict([]byte(manifest), &np); err != nil {
					t.Errorf("NodeProvider: %v", err)
					continue
				}
				s, err := parseSettings(&np)
				if err != nil {
					t.Errorf("NodeProvider %s: %v", np.Name, err)
				}
				providers[np.Name] = s
			case "NodePool":
				var pool v1alpha1.NodePool
				if err := yaml.UnmarshalStrict([]byte(manifest), &pool); err != nil {
					t.Errorf("NodePool: %v", err)
					continue
				}
				pools = append(pools, pool)
			default:
				t.Errorf("unexpected manifest kind %q", meta.Kind)
			}
		}
	}
	for _, pool := range pools {
		s, ok := providers[pool.Spec.ProviderRef.Name]
		if !ok {
			t.Errorf("NodePool %s names NodeProvider %s, which the page does not show", pool.Name, pool.Spec.ProviderRef.Name)
			continue
		}
		if shapes, err := (&Provider{settings: s}).Shapes(context.Background(), &pool); err != nil || len(shapes) == 0 {
			t.Errorf("NodePool %s: %d shapes, %v", pool.Name, len(shapes), err)
		}
	}
	if kinds["Secret"] != 1 || kinds["NodeProvider"] != 5 || kinds["NodePool"] != 3 {
		t.Errorf("documented manifests = %v, want a Secret, five NodeProviders (clone, per-node templates, bootstrap, netboot and GPU passthrough) and three NodePools", kinds)
	}
}
