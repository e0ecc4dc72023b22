package kubectlplugin

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"k8s.io/cli-runtime/pkg/genericiooptions"
)

// run runs the plugin in this process and returns what it printed.
func run(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	cmd := NewCommand(genericiooptions.IOStreams{In: &bytes.Buffer{}, Out: &out, ErrOut: &errOut})
	cmd.SetArgs(args)
	err := cmd.Execute()
	return out.String(), err
}

func TestVersionPrintsTheBuildAsTextAndAsData(t *testing.T) {
	out, err := run(t, "version")
	if err != nil || !strings.HasPrefix(out, "kubectl-claimscale dev (commit unknown, go") {
		t.Fatalf("version: %q, %v", out, err)
	}
	out, err = run(t, "version", "-o", "json")
	var data map[string]string
	if err != nil || json.Unmarshal([]byte(out), &data) != nil || data["version"] != "dev" {
		t.Fatalf("version -o json: %q, %v", out, err)
	}
	if _, err := run(t, "version", "-o", "wide"); err == nil || !strings.Contains(err.Error(), `unknown output format "wide"`) {
		t.Fatalf("version -o wide: %v", err)
	}
}

func TestWhyTakesKindAndNameAsKubectlDoes(t *testing.T) {
	for args, want := range map[string]string{
		"why pod/a b":   `give KIND/NAME or KIND NAME, not "pod/a" and "b"`,
		"why pod":       `"pod" names no object`,
		"why service x": `kind "service": want pod, pods, node, nodeclaim or provisioningrequest`,
	} {
		if _, err := run(t, strings.Fields(args)...); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", args, err, want)
		}
	}
}
