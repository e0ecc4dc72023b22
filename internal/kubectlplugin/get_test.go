package kubectlplugin

import (
	"bytes"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/claimscale/claimscale/api/v1alpha1"
)

func TestGetTableCountsInWordsAndShowsEveryClaim(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	created := metav1.NewTime(now.Add(-time.Minute))
	one := int32(1)
	pool := func(name string, limit *int32) v1alpha1.NodePool {
		p := v1alpha1.NodePool{ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: created}}
		if limit != nil {
			p.Spec.Limits = &v1alpha1.Limits{Nodes: limit}
		}
		return p
	}
	claim := func(name, pool string) v1alpha1.NodeClaim {
		c := v1alpha1.NodeClaim{ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: created}}
		c.Spec.NodePoolRef.Name = pool
		c.Spec.Shape = v1alpha1.ClaimShape{Name: "c4", Price: "0.4"}
		return c
	}
	booting := claim("general-abc", "general")
	booting.Status.Conditions = []metav1.Condition{{Type: v1alpha1.ConditionLaunched, Status: metav1.ConditionTrue}}
	view := &clusterView{
		pools:  []v1alpha1.NodePool{pool("general", &one), pool("idle", nil)},
		claims: []v1alpha1.NodeClaim{booting, claim("old-xyz", "old")},
		nodes:  map[string]*corev1.Node{},
	}
	var out bytes.Buffer
	if err := view.write(&out, now); err != nil {
		t.Fatal(err)
	}
	got := out.String()
	for _, want := range []string{
		"general  (pool: 1 claim, limit 1 node)",
		"general  general-abc                      -     c4     -     60s  -    -       0.4      Launched",
		"idle     (pool: 0 claims, no node limit)",
		"old      (pool: 1 claim, pool deleted)",
		"old      old-xyz",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("get printed\n%s\nwant it to contain %q", got, want)
		}
	}

	out.Reset()
	if err := (&clusterView{}).write(&out, now); err != nil {
		t.Fatal(err)
	}
	if out.String() != "No pools found.\n" {
		t.Errorf("an empty cluster: %q", out.String())
	}
}
