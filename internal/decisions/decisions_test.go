package decisions

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestStoreKeepsTheLatestRecordAndForgetsTheOldestWhenFull(t *testing.T) {
	store := &Store{Max: 3}
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := range 4 {
		store.RecordPod(PodRecord{Namespace: "ns", Name: fmt.Sprintf("p%d", i), Time: start.Add(time.Duration(i) * time.Second), Outcome: PodNewNode})
	}
	if _, ok := store.Pod("ns", "p0"); ok {
		t.Fatal("the oldest record is still there in a full store")
	}
	if got := len(store.Pods()); got != 3 {
		t.Fatalf("%d records, want the bound of 3", got)
	}
	store.RecordPod(PodRecord{Namespace: "ns", Name: "p1", Time: start.Add(time.Minute), Outcome: PodUnschedulable, Reason: "later"})
	if got, _ := store.Pod("ns", "p1"); got.Reason != "later" {
		t.Fatalf("record %+v, want the latest", got)
	}
	if got := len(store.Pods()); got != 3 {
		t.Fatalf("replacing a record evicted another: %d records", got)
	}
}

func TestDryRunMarksRecordsAndMetrics(t *testing.T) {
	store := NewStore(true)
	before := testutil.ToFloat64(NodeDecisions.WithLabelValues(NodeKept, NodeReasonPDB, "true"))
	store.RecordNode(NodeRecord{Node: "n1", NodeClaim: "c1", Outcome: NodeKept, Reason: NodeReasonPDB})
	got, ok := store.Node("c1")
	if !ok || !got.DryRun || got.Node != "n1" {
		t.Fatalf("record by claim name %+v, %v; want n1 marked dry-run", got, ok)
	}
	if after := testutil.ToFloat64(NodeDecisions.WithLabelValues(NodeKept, NodeReasonPDB, "true")); after != before+1 {
		t.Fatalf("dry-run counter went from %v to %v", before, after)
	}
}

func TestUnschedulablePodCountsEachRefusalKindOnce(t *testing.T) {
	label := func(kind string) float64 {
		return testutil.ToFloat64(PodDecisions.WithLabelValues(PodUnschedulable, kind, "false"))
	}
	filter, small := label("Filter"), label("TooSmall")
	(&Store{}).RecordPod(PodRecord{Namespace: "ns", Name: "p", Outcome: PodUnschedulable, Pools: []PoolRefusal{
		{Pool: "a", Kind: "Filter"}, {Pool: "b", Kind: "Filter"}, {Pool: "c", Kind: "TooSmall"},
	}})
	if label("Filter") != filter+1 || label("TooSmall") != small+1 {
		t.Fatalf("Filter %v→%v, TooSmall %v→%v; want each once", filter, label("Filter"), small, label("TooSmall"))
	}
}

func TestHandlerServesRecordsReadOnly(t *testing.T) {
	store := &Store{}
	store.RecordPod(PodRecord{Namespace: "shop", Name: "web", Outcome: PodUnschedulable, Reason: `pool "a": limit nodes=3 reached`})
	server := httptest.NewServer(Handler(store))
	defer server.Close()

	response, err := http.Get(server.URL + "/decisions/pods/shop/web")
	if err != nil {
		t.Fatal(err)
	}
	var got PodRecord
	if err := json.NewDecoder(response.Body).Decode(&got); err != nil {
		t.Fatal(err)
	}
	response.Body.Close()
	if got.Reason != `pool "a": limit nodes=3 reached` {
		t.Fatalf("served %+v", got)
	}
	for path, want := range map[string]int{"/decisions/pods/shop/other": http.StatusNotFound, "/decisions/nodes/n": http.StatusNotFound, "/decisions/x": http.StatusNotFound} {
		response, err := http.Get(server.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		response.Body.Close()
		if response.StatusCode != want {
			t.Errorf("GET %s: %d, want %d", path, response.StatusCode, want)
		}
	}
	response, err = http.Post(server.URL+"/decisions/pods/shop/web", "application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	response.Body.Close()
	if response.StatusCode != http.StatusMethodNotAllowed {
		t.Fatalf("POST answered %d", response.StatusCode)
	}
}

func TestANodeRecordALaterRoundDidNotRepeatIsNotCurrent(t *testing.T) {
	store := &Store{}
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	store.RecordNode(NodeRecord{Node: "n1", NodeClaim: "c1", Time: start, Outcome: NodeKept, Reason: NodeReasonConsolidateAfter})
	if r, _ := store.Node("n1"); !r.Current() {
		t.Fatalf("the only round's record %+v is not current", r)
	}
	store.RecordNode(NodeRecord{Node: "n2", NodeClaim: "c2", Time: start.Add(time.Minute), Outcome: NodeKept, Reason: NodeReasonPDB})
	for name, current := range map[string]bool{"n1": false, "c1": false, "n2": true} {
		r, ok := store.Node(name)
		if !ok || r.Current() != current || !r.LatestRound.Equal(start.Add(time.Minute)) {
			t.Errorf("record of %s: %+v (current %v), want current %v", name, r, r.Current(), current)
		}
	}
}
