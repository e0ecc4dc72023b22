package harness

import (
	"bytes"
	"os/exec"
	"path/filepath"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/claimscale/claimscale/internal/testenv"
)

// HelmTemplate renders the chart with the pinned helm binary.
func HelmTemplate(t *testing.T, args ...string) []*unstructured.Unstructured {
	t.Helper()
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return render(t, "helm", append([]string{"template", "claimscale", filepath.Join(root, "charts", "claimscale"), "--namespace", ControllerNamespace}, args...)...)
}

// Kustomize renders a kustomization with the pinned kubectl.
func Kustomize(t *testing.T, dir string) []*unstructured.Unstructured {
	t.Helper()
	return render(t, "kubectl", "kustomize", dir)
}

// render runs a pinned tool of bin/ and decodes the manifests it prints.
// The tool may still be building beside the tests (make test builds helm
// in the background): testenv.Tool waits for it.
func render(t *testing.T, tool string, args ...string) []*unstructured.Unstructured {
	t.Helper()
	binary, err := testenv.Tool(tool)
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd := exec.Command(binary, args...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %v: %v\n%s", tool, args, err, stderr.String())
	}
	objects, err := testenv.DecodeManifests(out)
	if err != nil {
		t.Fatalf("%s output: %v", tool, err)
	}
	return objects
}
