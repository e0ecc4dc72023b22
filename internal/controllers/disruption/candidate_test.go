package disruption

import (
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/internal/scheduling"
)

func TestSortByDisruptionCost(t *testing.T) {
	pod := func(priority int32) *corev1.Pod {
		return &corev1.Pod{Spec: corev1.PodSpec{Priority: &priority}}
	}
	candidateOf := func(name string, price float64, pods ...*corev1.Pod) *candidate {
		return &candidate{claim: &v1alpha1.NodeClaim{ObjectMeta: metav1.ObjectMeta{Name: name}}, pods: pods, price: price, cost: disruptionCost(pods)}
	}
	tests := []struct {
		name       string
		candidates []*candidate
		want       []string
	}{
		{
			name:       "fewer pods go first",
			candidates: []*candidate{candidateOf("three", 1, pod(0), pod(0), pod(0)), candidateOf("one", 1, pod(0))},
			want:       []string{"one", "three"},
		},
		{
			name:       "high-priority pods make a node dearer to disrupt than more low-priority ones",
			candidates: []*candidate{candidateOf("critical", 1, pod(1_000_000_000)), candidateOf("batch", 1, pod(0), pod(0))},
			want:       []string{"batch", "critical"},
		},
		{
			name:       "at equal cost the dearer node goes first",
			candidates: []*candidate{candidateOf("cheap", 0.2, pod(0)), candidateOf("dear", 0.4, pod(0))},
			want:       []string{"dear", "cheap"},
		},
		{
			name:       "ties go by name",
			candidates: []*candidate{candidateOf("b", 1, pod(0)), candidateOf("a", 1, pod(0))},
			want:       []string{"a", "b"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sortByDisruptionCost(tt.candidates)
			var got []string
			for _, c := range tt.candidates {
				got = append(got, c.claim.Name)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("order %v, want %v", got, tt.want)
			}
		})
	}
}

func TestDisruptionCostIsBounded(t *testing.T) {
	huge, negative := int32(2_000_000_000), int32(-2_000_000_000)
	pods := []*corev1.Pod{{Spec: corev1.PodSpec{Priority: &huge}}, {Spec: corev1.PodSpec{Priority: &negative}}}
	if cost := disruptionCost(pods); cost != 10-10 {
		t.Fatalf("cost %v, want each pod clamped to [-10, 10]", cost)
	}
}

func TestBlocker(t *testing.T) {
	controller := true
	owned := metav1.OwnerReference{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web", UID: "rs", Controller: &controller}
	pod := func(name string, mutate ...func(*corev1.Pod)) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "shop", Labels: map[string]string{"app": "web"}, OwnerReferences: []metav1.OwnerReference{owned}}}
		for _, m := range mutate {
			m(p)
		}
		return p
	}
	budget := func(namespace string, selector *metav1.LabelSelector, allowed int32) *policyv1.PodDisruptionBudget {
		return &policyv1.PodDisruptionBudget{
			ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: namespace},
			Spec:       policyv1.PodDisruptionBudgetSpec{Selector: selector},
			Status:     policyv1.PodDisruptionBudgetStatus{DisruptionsAllowed: allowed},
		}
	}
	web := &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}
	tests := []struct {
		name    string
		node    *corev1.Node
		pods    []*corev1.Pod
		budgets []*policyv1.PodDisruptionBudget
		want    string
	}{
		{name: "ordinary pods do not block", pods: []*corev1.Pod{pod("a")}, want: ""},
		{
			name: "a node annotated do-not-disrupt blocks",
			node: &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", Annotations: map[string]string{v1alpha1.AnnotationDoNotDisrupt: "true"}}},
			want: "node n is annotated claimscale.io/do-not-disrupt",
		},
		{
			name: "a pod annotated do-not-disrupt blocks",
			pods: []*corev1.Pod{pod("a", func(p *corev1.Pod) { p.Annotations = map[string]string{v1alpha1.AnnotationDoNotDisrupt: "true"} })},
			want: "pod shop/a is annotated claimscale.io/do-not-disrupt",
		},
		{
			name: "a pod without a controller blocks",
			pods: []*corev1.Pod{pod("a", func(p *corev1.Pod) { p.OwnerReferences = nil })},
			want: "pod shop/a has no controller and would not come back",
		},
		{
			name: "a finished pod without a controller does not block",
			pods: []*corev1.Pod{pod("a", func(p *corev1.Pod) { p.OwnerReferences, p.Status.Phase = nil, corev1.PodSucceeded })},
			want: "",
		},
		{
			name:    "a budget that allows no disruption now blocks",
			pods:    []*corev1.Pod{pod("a")},
			budgets: []*policyv1.PodDisruptionBudget{budget("shop", web, 0)},
			want:    "PodDisruptionBudget shop/web of pod a allows no disruption now",
		},
		{
			name:    "a budget that allows a disruption does not block",
			pods:    []*corev1.Pod{pod("a")},
			budgets: []*policyv1.PodDisruptionBudget{budget("shop", web, 1)},
			want:    "",
		},
		{
			name:    "a budget of another namespace does not apply",
			pods:    []*corev1.Pod{pod("a")},
			budgets: []*policyv1.PodDisruptionBudget{budget("other", web, 0)},
			want:    "",
		},
		{
			name:    "a budget with a null selector selects nothing",
			pods:    []*corev1.Pod{pod("a")},
			budgets: []*policyv1.PodDisruptionBudget{budget("shop", nil, 0)},
			want:    "",
		},
		{
			name:    "a budget with an empty selector selects every pod of its namespace",
			pods:    []*corev1.Pod{pod("a")},
			budgets: []*policyv1.PodDisruptionBudget{budget("shop", &metav1.LabelSelector{}, 0)},
			want:    "PodDisruptionBudget shop/web of pod a allows no disruption now",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			node := tt.node
			if node == nil {
				node = &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n"}}
			}
			if got := blocker(node, tt.pods, tt.budgets); got != tt.want {
				t.Fatalf("blocker %q, want %q", got, tt.want)
			}
		})
	}
}

// Prices summed in floating point (0.2 three times) read as the prices
// people set, not 0.6000000000000001.
func TestConsolidationMessageRoundsSummedPrices(t *testing.T) {
	candidateOf := func(name string) *candidate {
		return &candidate{claim: &v1alpha1.NodeClaim{ObjectMeta: metav1.ObjectMeta{Name: name}}, price: 0.2}
	}
	cmd := &command{
		candidates:   []*candidate{candidateOf("a"), candidateOf("b"), candidateOf("c")},
		replacements: []scheduling.NewNode{{Pool: "pool", Shape: scheduling.Shape{Name: "c2", Price: 0.2}}},
	}
	want := "the pods of 3 underused nodes (a, b, c) fit on one cheaper node: c2 of pool pool at 0.2/h instead of 0.6/h"
	if got := consolidationMessage(cmd); got != want {
		t.Errorf("consolidationMessage = %q, want %q", got, want)
	}
}
