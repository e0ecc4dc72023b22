package metrics

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestAlertRules runs Prometheus' own rule unit tests
// (testdata/alerts_test.yaml) on the chart's alert rules with the pinned
// promtool that hack/tools.sh builds into bin/.
func TestAlertRules(t *testing.T) {
	promtool, err := filepath.Abs("../../bin/promtool")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(promtool); err != nil {
		t.Fatalf("%s missing: run hack/tools.sh promtool (make test does): %v", promtool, err)
	}
	check := exec.Command(promtool, "check", "rules", "../../charts/claimscale/files/alerts.yaml")
	if out, err := check.CombinedOutput(); err != nil {
		t.Fatalf("promtool check rules: %v\n%s", err, out)
	}
	test := exec.Command(promtool, "test", "rules", "testdata/alerts_test.yaml")
	if out, err := test.CombinedOutput(); err != nil {
		t.Fatalf("promtool test rules: %v\n%s", err, out)
	}
}
