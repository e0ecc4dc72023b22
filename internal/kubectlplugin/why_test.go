package kubectlplugin

import (
	"bytes"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/claimscale/claimscale/internal/decisions"
	"github.com/claimscale/claimscale/internal/scheduling"
)

func TestWhyNodeAnswersFromTheLatestRoundOrFromNow(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	held := &decisions.NodeRecord{Node: "n", NodeClaim: "c", Pool: "p", Time: now.Add(-3 * time.Minute), LatestRound: now.Add(-3 * time.Minute),
		Outcome: decisions.NodeKept, Reason: decisions.NodeReasonConsolidateAfter, Message: "empty at …, consolidateAfter of 5m0s not yet passed (10s left)"}
	notCandidate := &ScaleDownNodeVerdict{Node: "n", NodeClaim: "c", Pool: "p", Outcome: "NotCandidate", Message: "runs 9 pods, and pool p consolidates only empty nodes (consolidationPolicy WhenEmpty)"}
	pinned := &ScaleDownNodeVerdict{Node: "n", NodeClaim: "c", Pool: "p", Outcome: decisions.NodeKept, Reason: decisions.NodeReasonDoNotDisrupt, Message: "pod x is annotated claimscale.io/do-not-disrupt"}
	superseded := *held
	superseded.LatestRound = now.Add(-time.Second)
	for _, tt := range []struct {
		name   string
		answer NodeAnswer
		want   []string
	}{{
		name:   "a node no round looks at any more: what a round decides now, and that the record no longer holds",
		answer: NodeAnswer{Record: held, Now: notCandidate},
		want: []string{"node n (claim c, pool p): not a candidate now, as a disruption round would decide it\n  runs 9 pods",
			"the last record, from a round 3m ago, no longer holds: Kept, ConsolidateAfter"},
	}, {
		name:   "the latest round's record, and a round now that decides otherwise: both",
		answer: NodeAnswer{Record: held, Now: pinned},
		want:   []string{"node n (claim c, pool p): Kept, ConsolidateAfter, decided 3m ago", "a round taken now would decide otherwise: Kept, DoNotDisrupt: pod x"},
	}, {
		name:   "a record later rounds did not repeat, and no plan: said so",
		answer: NodeAnswer{Record: &superseded},
		want:   []string{"Kept, ConsolidateAfter, decided 3m ago", "later rounds (the latest 1s ago) did not repeat this record"},
	}, {
		name:   "the record and now agree: the record",
		answer: NodeAnswer{Record: held, Current: true, Now: &ScaleDownNodeVerdict{Outcome: decisions.NodeKept, Reason: decisions.NodeReasonConsolidateAfter}},
		want:   []string{"node n (claim c, pool p): Kept, ConsolidateAfter, decided 3m ago\n  empty at"},
	}} {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			if err := writeNodeAnswer(&out, "node", "n", tt.answer, nil, now); err != nil {
				t.Fatal(err)
			}
			for _, want := range tt.want {
				if !strings.Contains(out.String(), want) {
					t.Errorf("why said\n%s\nwant it to contain %q", out.String(), want)
				}
			}
		})
	}
	if err := writeNodeAnswer(&bytes.Buffer{}, "node", "ghost", NodeAnswer{}, nil, now); err == nil || !strings.Contains(err.Error(), "node ghost not found") {
		t.Errorf("a node that is nobody's: %v", err)
	}
}

func TestWhyPodSaysWhenThePodIsGoneOrNeverWas(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	record := &decisions.PodRecord{Namespace: "shop", Name: "web", Time: now.Add(-time.Minute), Outcome: decisions.PodUnschedulable, Reason: "x"}
	var out bytes.Buffer
	if err := writePodAnswer(&out, PodAnswer{Namespace: "shop", Name: "web", Record: record}, true, now); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(out.String(), "pod shop/web is gone; the last decision about it:\npod shop/web: Unschedulable, decided 60s ago") {
		t.Errorf("a gone pod: %q", out.String())
	}
	out.Reset()
	if err := writePodAnswer(&out, PodAnswer{Namespace: "shop", Name: "web", Exists: true, NodeName: "n1", Record: record}, true, now); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "since then, the pod was scheduled on node n1") {
		t.Errorf("a pod scheduled since: %q", out.String())
	}
	if err := writePodAnswer(&out, PodAnswer{Namespace: "shop", Name: "ghost"}, true, now); err == nil || err.Error() != "pod shop/ghost not found" {
		t.Errorf("a pod that never was: %v", err)
	}
}

func TestWhyPodSaysWhichSleepingClaimWasWokenForIt(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	record := decisions.PodRecord{
		Namespace: "shop", Name: "web", Time: now.Add(-time.Minute), Outcome: decisions.PodWoken,
		Pool: "general", Shape: "c2", Zone: "a", NodeClaim: "general-x7k2p", Reason: decisions.WokenReason("general-x7k2p"),
	}
	var out bytes.Buffer
	if err := writePodAnswer(&out, PodAnswer{Namespace: "shop", Name: "web", Exists: true, Record: &record}, true, now); err != nil {
		t.Fatal(err)
	}
	want := "pod shop/web: Woken, decided 60s ago\n  woken: sleeping claim general-x7k2p (pool general, shape c2, zone a), instead of a new node\n"
	if out.String() != want {
		t.Errorf("why for a pod a sleeping machine was woken for:\n%s\nwant:\n%s", out.String(), want)
	}
}

func TestSimulateCountsAWokenMachineApartFromNewNodes(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web"}}
	var report SimulationReport
	report.add(scheduling.Result{NewNodes: []scheduling.NewNode{
		{Pool: "general", Shape: scheduling.Shape{Name: "c2", Price: 0.1}, Pods: []*corev1.Pod{pod}, Wake: "general-x7k2p"},
		{Pool: "general", Shape: scheduling.Shape{Name: "c2", Price: 0.1}, Pods: []*corev1.Pod{pod}},
	}})
	if report.NewNodeCount != 1 || len(report.Woken) != 1 || report.Woken[0].NodeClaim != "general-x7k2p" {
		t.Fatalf("new nodes %d, woken %+v: want one of each", report.NewNodeCount, report.Woken)
	}
	var out bytes.Buffer
	if err := writeSimulation(&out, &report); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "would buy 1 node") || !strings.Contains(out.String(), "would wake sleeping claim general-x7k2p (pool general, shape c2) for 1 pod\n") {
		t.Errorf("simulate printed:\n%s", out.String())
	}
}
