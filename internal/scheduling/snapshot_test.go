package scheduling

import (
	"reflect"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func nodeNames(t *testing.T, s *Snapshot) []string {
	t.Helper()
	list, err := s.NodeInfos().List()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, ni := range list {
		out = append(out, ni.Node().Name)
	}
	return out
}

func podCount(t *testing.T, s *Snapshot, node string) int {
	t.Helper()
	ni, err := s.NodeInfos().Get(node)
	if err != nil {
		t.Fatal(err)
	}
	return len(ni.GetPods())
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestSnapshotForkRevertCommit(t *testing.T) {
	tests := []struct {
		name      string
		change    func(t *testing.T, s *Snapshot)
		finish    func(s *Snapshot)
		wantNodes []string
		wantPods  int // on n1
	}{
		{
			name: "revert drops added nodes and pods",
			change: func(t *testing.T, s *Snapshot) {
				must(t, s.AddNode(node("n3", "1", "1Gi", nil)))
				must(t, s.AddPod(pod("b", "1", "1Gi"), "n1"))
			},
			finish:    (*Snapshot).Revert,
			wantNodes: []string{"n1", "n2"},
			wantPods:  1,
		},
		{
			name: "commit keeps them",
			change: func(t *testing.T, s *Snapshot) {
				must(t, s.AddNode(node("n3", "1", "1Gi", nil)))
				must(t, s.AddPod(pod("b", "1", "1Gi"), "n1"))
			},
			finish:    (*Snapshot).Commit,
			wantNodes: []string{"n1", "n2", "n3"},
			wantPods:  2,
		},
		{
			name:      "revert brings back a removed node with its pods",
			change:    func(t *testing.T, s *Snapshot) { must(t, s.RemoveNode("n1")) },
			finish:    (*Snapshot).Revert,
			wantNodes: []string{"n1", "n2"},
			wantPods:  1,
		},
		{
			name: "revert brings back a removed pod",
			change: func(t *testing.T, s *Snapshot) {
				must(t, s.RemovePod(pod("a", "1", "1Gi"), "n1"))
			},
			finish:    (*Snapshot).Revert,
			wantNodes: []string{"n1", "n2"},
			wantPods:  1,
		},
		{
			name:      "commit of a removal removes",
			change:    func(t *testing.T, s *Snapshot) { must(t, s.RemoveNode("n2")) },
			finish:    (*Snapshot).Commit,
			wantNodes: []string{"n1"},
			wantPods:  1,
		},
		{
			name: "nested forks revert one layer at a time",
			change: func(t *testing.T, s *Snapshot) {
				must(t, s.AddPod(pod("b", "1", "1Gi"), "n1"))
				s.Fork()
				must(t, s.AddPod(pod("c", "1", "1Gi"), "n1"))
				must(t, s.RemoveNode("n2"))
				s.Revert()
			},
			finish:    (*Snapshot).Commit,
			wantNodes: []string{"n1", "n2"},
			wantPods:  2,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := NewSnapshot()
			must(t, s.AddNode(node("n1", "4", "8Gi", nil), pod("a", "1", "1Gi", onNode("n1"))))
			must(t, s.AddNode(node("n2", "4", "8Gi", nil)))
			base, _ := s.NodeInfos().Get("n1")
			s.Fork()
			tc.change(t, s)
			tc.finish(s)
			if got := nodeNames(t, s); !slices.Equal(got, tc.wantNodes) {
				t.Errorf("nodes = %v, want %v", got, tc.wantNodes)
			}
			if slices.Contains(tc.wantNodes, "n1") {
				if got := podCount(t, s, "n1"); got != tc.wantPods {
					t.Errorf("pods on n1 = %d, want %d", got, tc.wantPods)
				}
			}
			// Copy on write: a change in a fork never touches the node
			// object of the layer below.
			if got := len(base.GetPods()); got != 1 {
				t.Errorf("the base layer's NodeInfo changed: %d pods", got)
			}
		})
	}
}

func TestSnapshotAffinityLists(t *testing.T) {
	s := NewSnapshot()
	must(t, s.AddNode(node("n1", "4", "8Gi", nil)))
	must(t, s.AddNode(node("n2", "4", "8Gi", nil)))
	l := s.NodeInfos()
	if got, _ := l.HavePodsWithRequiredAntiAffinityList(); len(got) != 0 {
		t.Fatalf("anti-affinity list = %d nodes, want none", len(got))
	}
	s.Fork()
	must(t, s.AddPod(pod("db", "1", "1Gi", label("app", "db"), podAntiAffinity(corev1.LabelHostname, "db")), "n2"))
	got, _ := l.HavePodsWithRequiredAntiAffinityList()
	if len(got) != 1 || got[0].Node().Name != "n2" {
		t.Fatalf("anti-affinity list after adding to n2 = %v", got)
	}
	if got, _ := l.HavePodsWithAffinityList(); len(got) != 1 {
		t.Fatalf("affinity list = %d nodes, want 1", len(got))
	}
	s.Revert()
	if got, _ := l.HavePodsWithRequiredAntiAffinityList(); len(got) != 0 {
		t.Fatalf("anti-affinity list after revert = %d nodes, want none", len(got))
	}
}

func TestSnapshotRejectsDuplicatesAndUnknowns(t *testing.T) {
	s := NewSnapshot()
	must(t, s.AddNode(node("n1", "4", "8Gi", nil)))
	if err := s.AddNode(node("n1", "4", "8Gi", nil)); err == nil {
		t.Error("adding n1 twice succeeded")
	}
	if err := s.RemoveNode("ghost"); err == nil {
		t.Error("removing an unknown node succeeded")
	}
	if err := s.AddPod(pod("p", "1", "1Gi"), "ghost"); err == nil {
		t.Error("adding a pod to an unknown node succeeded")
	}
	s.Fork()
	must(t, s.RemoveNode("n1"))
	must(t, s.AddNode(node("n1", "8", "8Gi", nil)))
	ni, _ := s.NodeInfos().Get("n1")
	if ni.GetAllocatable().GetMilliCPU() != 8000 {
		t.Errorf("re-added n1 has %dm cpu, want the new node's 8000m", ni.GetAllocatable().GetMilliCPU())
	}
	s.Revert()
	ni, _ = s.NodeInfos().Get("n1")
	if ni.GetAllocatable().GetMilliCPU() != 4000 {
		t.Errorf("after revert n1 has %dm cpu, want 4000m", ni.GetAllocatable().GetMilliCPU())
	}
}

// A batch of a simple class's pods leaves a node as adding them one by one
// does: the same pods, requested sums and non-zero sums.
func TestBatchOfSimplePodsAddsLikeOneByOne(t *testing.T) {
	batch, single := NewSnapshot(), NewSnapshot()
	for _, s := range []*Snapshot{batch, single} {
		must(t, s.AddNode(node("n", "8", "32Gi", nil)))
	}
	ps := pods(5, "web", "300m", "1Gi")
	ps = append(ps, pods(3, "best-effort", "0", "0")...)
	for _, group := range [][]*corev1.Pod{ps[:5], ps[5:]} {
		cls, err := newPodClass(0, group[0])
		must(t, err)
		cls.simple = true
		infos := make([]podInfo, len(group))
		for i, p := range group {
			infos[i] = podInfo{pod: p, cls: cls}
		}
		must(t, batch.addPodInfos(infos, "n"))
		for _, p := range group {
			must(t, single.AddPod(p, "n"))
		}
	}
	a, b := batch.lookup("n"), single.lookup("n")
	if len(a.Pods) != len(b.Pods) || !reflect.DeepEqual(a.Requested, b.Requested) || !reflect.DeepEqual(a.NonZeroRequested, b.NonZeroRequested) {
		t.Errorf("batch: %d pods, requested %+v, non-zero %+v; one by one: %d pods, requested %+v, non-zero %+v",
			len(a.Pods), *a.Requested, *a.NonZeroRequested, len(b.Pods), *b.Requested, *b.NonZeroRequested)
	}
	for i := range a.Pods {
		if a.Pods[i].GetPod() != b.Pods[i].GetPod() {
			t.Errorf("pod %d: %s, want %s", i, a.Pods[i].GetPod().Name, b.Pods[i].GetPod().Name)
		}
	}
}

// A frozen layer is shared with other snapshots: changes made without a
// fork go above it, and neither Revert nor Commit reaches it.
func TestSnapshotNeverWritesAFrozenLayer(t *testing.T) {
	s := NewSnapshot()
	must(t, s.AddNode(node("n1", "4", "8Gi", nil)))
	shared, _ := s.NodeInfos().Get("n1")
	s.freeze()
	must(t, s.AddPod(pod("a", "1", "1Gi"), "n1"))
	must(t, s.AddNode(node("n2", "4", "8Gi", nil)))
	s.Revert()
	s.Commit()
	if len(shared.GetPods()) != 0 {
		t.Errorf("the frozen NodeInfo of n1 holds %d pods, want 0", len(shared.GetPods()))
	}
	if podCount(t, s, "n1") != 1 || !slices.Equal(nodeNames(t, s), []string{"n1", "n2"}) {
		t.Errorf("the changes above the frozen layer were lost: %d pods on n1, nodes %v", podCount(t, s, "n1"), nodeNames(t, s))
	}
	must(t, s.RemoveNode("n1"))
	if _, err := s.NodeInfos().Get("n1"); err == nil {
		t.Error("n1 removed above the frozen layer is still listed")
	}
}
