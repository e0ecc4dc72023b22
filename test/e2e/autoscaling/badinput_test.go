package autoscaling

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/pkg/provider/proxmox"
	"github.com/claimscale/claimscale/test/e2e/internal/harness"
)

// badObject is one row of testdata/badobjects.jsonl: an object of kind,
// named name, whose spec is the kind's healthy base spec with spec merged
// over it (JSON merge patch: null removes a field), and the substrings one
// of which must name what is wrong.
type badObject struct {
	Kind   string         `json:"kind"`
	Name   string         `json:"name"`
	Expect []string       `json:"expect"`
	Spec   map[string]any `json:"spec"`

	line    int
	object  *unstructured.Unstructured
	created time.Time
	// outcome: how the object was refused, empty while it is not yet.
	outcome string
}

// baseSpecs are healthy specs the rows modify: the scenario's simulated
// provider and pool, and a claim of that pool.
func baseSpecs(pool string) map[string]string {
	return map[string]string{
		"NodeProvider": `{"type":"simulated","simulated":{}}`,
		"NodePool":     `{"providerRef":{"name":"` + pool + `"},"shapes":{"fixed":[{"name":"c4","cpu":"4","memory":"16Gi"}]},"template":{"labels":{"scenario":"badinput-bad"}}}`,
		"NodeClaim":    `{"nodePoolRef":{"name":"` + pool + `"},"shape":{"name":"c4","cpu":"4","memory":"16Gi"}}`,
	}
}

func readBadObjects(t *testing.T, pool string) []*badObject {
	t.Helper()
	file, err := os.Open(filepath.Join("testdata", "badobjects.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	bases := baseSpecs(pool)
	var rows []*badObject
	scanner := bufio.NewScanner(file)
	scanner.Buffer(nil, 1<<20)
	for line := 1; scanner.Scan(); line++ {
		text := strings.TrimSpace(scanner.Text())
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		row := &badObject{line: line}
		if err := json.Unmarshal([]byte(text), row); err != nil {
			t.Fatalf("badobjects.jsonl:%d: %v", line, err)
		}
		var spec map[string]any
		if err := json.Unmarshal([]byte(bases[row.Kind]), &spec); err != nil {
			t.Fatalf("badobjects.jsonl:%d: no base for kind %q", line, row.Kind)
		}
		row.object = &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": v1alpha1.GroupVersion.String(), "kind": row.Kind,
			"metadata": map[string]any{"name": row.Name},
			"spec":     mergePatch(spec, row.Spec),
		}}
		rows = append(rows, row)
	}
	if err := scanner.Err(); err != nil {
		t.Fatal(err)
	}
	return rows
}

// mergePatch applies patch to base as a JSON merge patch (RFC 7386).
func mergePatch(base, patch map[string]any) map[string]any {
	for key, value := range patch {
		if value == nil {
			delete(base, key)
			continue
		}
		if patchMap, ok := value.(map[string]any); ok {
			if baseMap, ok := base[key].(map[string]any); ok {
				base[key] = mergePatch(baseMap, patchMap)
				continue
			}
			base[key] = mergePatch(map[string]any{}, patchMap)
			continue
		}
		base[key] = value
	}
	return base
}

func (row *badObject) names(text string) bool {
	for _, want := range row.Expect {
		if strings.Contains(text, want) {
			return true
		}
	}
	return false
}

// surfaced returns what the controller says about the object: the reasons
// and messages of its conditions that are not True, and its events.
func (row *badObject) surfaced(g Gomega) string {
	current := &unstructured.Unstructured{}
	current.SetGroupVersionKind(row.object.GroupVersionKind())
	if err := env.Client.Get(context.Background(), client.ObjectKey{Name: row.Name}, current); err != nil {
		return ""
	}
	var said []string
	conditions, _, _ := unstructured.NestedSlice(current.Object, "status", "conditions")
	for _, c := range conditions {
		condition, _ := c.(map[string]any)
		if condition["status"] != string(metav1.ConditionTrue) {
			said = append(said, fmt.Sprintf("%v=%v %v: %v", condition["type"], condition["status"], condition["reason"], condition["message"]))
		}
	}
	said = append(said, harness.EventsOf(g.(*WithT), row.Kind, row.Name)...)
	return strings.Join(said, "\n")
}

// Every row of testdata/badobjects.jsonl is either refused at admission
// with a message that names what is wrong, or accepted and then reported
// on the object's own conditions or events within 10 s; meanwhile a healthy
// pool beside them scales a Deployment from zero about as fast as it does
// alone.
func TestBadObjectsFailOnlyThemselves(t *testing.T) {
	harness.StartOperator(t, harness.OperatorOptions{})
	s := harness.NewScenario(t, "badinput")
	defer s.Cleanup()
	s.CreateProvider(v1alpha1.SimulatedSettings{})
	s.CreatePool(nil)
	s.CreateSecret("badinput-proxmox", map[string][]byte{
		proxmox.SecretKeyTokenID: []byte("claimscale@pve!autoscaler"), proxmox.SecretKeyTokenSecret: []byte("token-secret-value"),
	})
	s.CreateSecret("badinput-wrong-keys", map[string][]byte{"user": []byte("root")})

	// Alone: two pods of 3 cpu, so two new nodes.
	alone := timeToRunning(s, "alone")

	rows := readBadObjects(t, s.Name)
	s.G.Expect(len(rows)).To(BeNumerically(">=", 60))
	t.Cleanup(func() {
		for i := len(rows) - 1; i >= 0; i-- {
			_ = env.Client.Delete(context.Background(), rows[i].object)
		}
	})
	for _, row := range rows {
		row.created = time.Now()
		err := env.Client.Create(context.Background(), row.object.DeepCopy())
		switch {
		case err == nil:
		case row.names(err.Error()):
			row.outcome = "admission"
		default:
			t.Errorf("badobjects.jsonl:%d %s %s: refused without naming %q: %v", row.line, row.Kind, shortName(row.Name), row.Expect, err)
			row.outcome = "admission (unnamed)"
		}
	}
	// Beside them: the same Deployment again, while they are being handled.
	besideStarted := time.Now()
	s.CreateDeployment("beside", 2, "3", nil)

	// Each accepted row has 10 s from its creation to be reported; they
	// were all created within a moment, so one poll serves them all.
	_ = wait.PollUntilContextTimeout(context.Background(), 250*time.Millisecond, time.Until(rows[len(rows)-1].created.Add(10*time.Second)), true,
		func(context.Context) (bool, error) {
			pending := 0
			for _, row := range rows {
				if row.outcome != "" {
					continue
				}
				if said := row.surfaced(s.G); row.names(said) {
					row.outcome = fmt.Sprintf("runtime after %s", time.Since(row.created).Round(100*time.Millisecond))
					continue
				}
				pending++
			}
			return pending == 0, nil
		})
	s.G.Eventually(func() int { return s.RunningPods("beside") }).WithTimeout(time.Minute).WithPolling(50 * time.Millisecond).Should(Equal(2))
	beside := time.Since(besideStarted)

	counts := map[string]int{}
	for _, row := range rows {
		if row.outcome == "" {
			t.Errorf("badobjects.jsonl:%d %s %s: accepted, and nothing names %q on it after 10 s; it says:\n%s",
				row.line, row.Kind, shortName(row.Name), row.Expect, row.surfaced(s.G))
			continue
		}
		counts[strings.Fields(row.outcome)[0]]++
		t.Logf("badobjects.jsonl:%d %s %s: %s", row.line, row.Kind, shortName(row.Name), row.outcome)
	}
	t.Logf("%d bad objects: %d refused at admission, %d reported at runtime; healthy pool 0→2 Running: %s alone, %s beside them",
		len(rows), counts["admission"], counts["runtime"], alone.Round(10*time.Millisecond), beside.Round(10*time.Millisecond))
	s.G.Expect(beside).To(BeNumerically("<", 2*alone+5*time.Second), "the healthy pool is slowed down by the bad objects")
}

// timeToRunning creates a Deployment of two 3-cpu pods on the scenario's
// pool and returns how long until both are Running.
func timeToRunning(s *harness.Scenario, app string) time.Duration {
	started := time.Now()
	s.CreateDeployment(app, 2, "3", nil)
	s.G.Eventually(func() int { return s.RunningPods(app) }).WithTimeout(time.Minute).WithPolling(50 * time.Millisecond).Should(Equal(2))
	return time.Since(started)
}

func shortName(name string) string {
	if len(name) > 40 {
		return fmt.Sprintf("%s…(%d characters)", name[:20], len(name))
	}
	return name
}
