package v1alpha1_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/claimscale/claimscale/api/v1alpha1"
)

// Every NodeProvider type the API accepts is named where a user looks for
// them: the README's sample, the concepts page, and the field's own
// documentation in the CRD (kubectl explain nodeprovider.spec.type).
func TestEveryProviderTypeIsDocumented(t *testing.T) {
	root := filepath.Join("..", "..")
	types := []v1alpha1.ProviderType{
		v1alpha1.ProviderTypeProxmox, v1alpha1.ProviderTypeCloudscale, v1alpha1.ProviderTypeClusterAPI,
		v1alpha1.ProviderTypeGRPC, v1alpha1.ProviderTypeSimulated, v1alpha1.ProviderTypeRedfish,
	}
	crd, err := os.ReadFile(filepath.Join(root, "config", "crd", "bases", "claimscale.io_nodeproviders.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	// The type field's description, up to the next field.
	description := string(crd)
	if i := strings.Index(description, "              type:\n                description:"); i >= 0 {
		description = description[i:]
		if end := strings.Index(description, "enum:"); end >= 0 {
			description = description[:end]
		}
	} else {
		t.Fatal("no description of spec.type in the CRD")
	}
	for _, doc := range []struct{ name, text string }{
		{"README.md", read(t, filepath.Join(root, "README.md"))},
		{"docs/concepts.md", read(t, filepath.Join(root, "docs", "concepts.md"))},
		{"the CRD's description of spec.type", description},
	} {
		for _, providerType := range types {
			if !regexp.MustCompile(`\b` + string(providerType) + `\b`).MatchString(doc.text) {
				t.Errorf("%s does not name the NodeProvider type %s", doc.name, providerType)
			}
		}
	}
}

func read(t *testing.T, path string) string {
	t.Helper()
	content, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(content)
}
