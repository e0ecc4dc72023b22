// Package decisions keeps what provisioning and disruption last decided
// about each pod and each node, so that "why is this pod pending" and "why
// is this node still here" are answered from the decision itself, not from
// logs: the record types, a bounded in-memory store of the latest record
// per pod and per node, the metrics of the reasons, and a read-only HTTP
// handler that serves the records.
package decisions

import (
	"sort"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/claimscale/claimscale/internal/scheduling"
)

// Pod outcomes.
const (
	// PodNewNode: a new node was (or, in dry-run, would be) bought for it.
	PodNewNode = "NewNode"
	// PodWoken: a sleeping machine was (or, in dry-run, would be) woken
	// for it instead of a new one; NodeClaim names the woken claim.
	PodWoken = "Woken"
	// PodUnschedulable: no pool can open a node that holds it.
	PodUnschedulable = "Unschedulable"
)

// WokenReason is how a pod's decision, its events and `kubectl claimscale
// why` say that a sleeping machine was woken for it.
func WokenReason(claim string) string { return "woken: sleeping claim " + claim }

// PodRecord is the latest provisioning decision about a pending pod.
type PodRecord struct {
	Namespace string    `json:"namespace"`
	Name      string    `json:"name"`
	Time      time.Time `json:"time"`
	// DryRun is set when the controller decided without acting.
	DryRun  bool   `json:"dryRun,omitempty"`
	Outcome string `json:"outcome"`
	// Pool, Shape and Zone of the new node, and its claim (empty in
	// dry-run).
	Pool      string `json:"pool,omitempty"`
	Shape     string `json:"shape,omitempty"`
	Zone      string `json:"zone,omitempty"`
	NodeClaim string `json:"nodeClaim,omitempty"`
	// Reason is the short form, as on the pod's event.
	Reason string `json:"reason,omitempty"`
	// Pools says, per pool, why it could not take the pod.
	Pools []PoolRefusal `json:"pools,omitempty"`
}

// PoolRefusal is one pool's reason, with its numbers.
type PoolRefusal struct {
	Pool    string `json:"pool"`
	Kind    string `json:"kind"`
	Plugin  string `json:"plugin,omitempty"`
	Message string `json:"message"`
	Shape   string `json:"shape,omitempty"`
	// Requested by the pod and its node's DaemonSet pods, and Available
	// on Shape, for a shape too small.
	Requested corev1.ResourceList `json:"requested,omitempty"`
	Available corev1.ResourceList `json:"available,omitempty"`
	// Limits of the pool and what counts against them, for a limit hit.
	Limits corev1.ResourceList `json:"limits,omitempty"`
	InUse  corev1.ResourceList `json:"inUse,omitempty"`
}

// Refusals converts the scheduling package's refusals.
func Refusals(in []scheduling.PoolRefusal) []PoolRefusal {
	out := make([]PoolRefusal, 0, len(in))
	for _, r := range in {
		out = append(out, PoolRefusal{
			Pool: r.Pool, Kind: string(r.Kind), Plugin: r.Plugin, Message: r.Message, Shape: r.Shape,
			Requested: r.Requested, Available: r.Available, Limits: r.Limits, InUse: r.InUse,
		})
	}
	return out
}

// NodeRecord is the latest disruption decision about a node.
type NodeRecord struct {
	Node      string    `json:"node"`
	NodeClaim string    `json:"nodeClaim"`
	Pool      string    `json:"pool"`
	Time      time.Time `json:"time"`
	DryRun    bool      `json:"dryRun,omitempty"`
	// Outcome: Kept, or Disrupting.
	Outcome string `json:"outcome"`
	// Reason is one of the NodeReason values.
	Reason  string `json:"reason"`
	Message string `json:"message"`
	// LatestRound is when the latest disruption round that recorded any
	// node decided, set when the record is served: a record older than it
	// is one a later round did not repeat, because it no longer looked at
	// the node or found nothing to say.
	LatestRound time.Time `json:"latestRound,omitempty"`
}

// Current reports whether the record is from the latest round that
// recorded anything.
func (r NodeRecord) Current() bool { return !r.Time.Before(r.LatestRound) }

// Node outcomes.
const (
	NodeKept       = "Kept"
	NodeDisrupting = "Disrupting"
)

// Node reasons: a closed set, the metric's label.
const (
	NodeReasonDoNotDisrupt = "DoNotDisrupt"
	NodeReasonPDB          = "PodDisruptionBudget"
	NodeReasonNoController = "NoController"
	NodeReasonBudget       = "DisruptionBudget"
	NodeReasonWouldNotFit  = "WouldNotFit"
	NodeReasonNotCheaper   = "ReplacementNotCheaper"
	NodeReasonPendingPods  = "PendingPods"
	NodeReasonConsolidate  = "Consolidatable"
	// NodeReasonConsolidateAfter: the node emptied out, or its pods last
	// changed, less than its pool's consolidateAfter ago.
	NodeReasonConsolidateAfter = "ConsolidateAfter"
	// NodeReasonMinNodes: taking the node would leave its pool below
	// minNodes.
	NodeReasonMinNodes = "MinNodes"
	// NodeReasonHeadroom: the pool's headroom would no longer fit.
	NodeReasonHeadroom       = "Headroom"
	NodeReasonOther          = "Other"
	podReasonNewNode         = "NewNode"
	podReasonSleepingMachine = "SleepingMachine"
	podReasonNoPool          = "NoPool"
	podReasonNoRemainingNode = "NoRoom"
)

// DefaultMaxRecords bounds each of the store's maps.
const DefaultMaxRecords = 10000

// Store keeps the latest record per pod and per node, at most Max of each:
// when full, the least recently recorded goes. Safe for concurrent use; a nil Store
// records nothing.
type Store struct {
	// Max records of each kind (default DefaultMaxRecords).
	Max int
	// DryRun marks every record, event and metric: the controller decides
	// but does not act.
	DryRun bool

	mu     sync.RWMutex
	pods   recent[PodRecord]
	nodes  recent[NodeRecord]
	offers map[string]PoolOffer
	// latestNodeRound is the time of the newest node record: a round
	// records its nodes with the round's time.
	latestNodeRound time.Time
}

// EventNote marks an event's note as a dry-run controller's, which decided
// but did not act.
func EventNote(dryRun bool, note string) string {
	if dryRun {
		return "dry-run: " + note
	}
	return note
}

// NewStore returns an empty store.
func NewStore(dryRun bool) *Store { return &Store{DryRun: dryRun} }

func (s *Store) max() int {
	if s.Max > 0 {
		return s.Max
	}
	return DefaultMaxRecords
}

// RecordPod keeps the record as the pod's latest and counts it.
func (s *Store) RecordPod(record PodRecord) {
	if s == nil {
		return
	}
	record.DryRun = s.DryRun
	s.mu.Lock()
	s.pods.put(record.Namespace+"/"+record.Name, record, s.max())
	s.mu.Unlock()
	countPod(record, s.DryRun)
}

// RecordNode keeps the record as the node's latest and counts it.
func (s *Store) RecordNode(record NodeRecord) {
	if s == nil {
		return
	}
	record.DryRun = s.DryRun
	s.mu.Lock()
	s.nodes.put(record.Node, record, s.max())
	if record.Time.After(s.latestNodeRound) {
		s.latestNodeRound = record.Time
	}
	s.mu.Unlock()
	NodeDecisions.WithLabelValues(record.Outcome, record.Reason, dryRunLabel(s.DryRun)).Inc()
}

// Pod returns the latest record of a pod.
func (s *Store) Pod(namespace, name string) (PodRecord, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.pods.get(namespace + "/" + name)
}

// Node returns the latest record of a node, by node or claim name.
func (s *Store) Node(name string) (NodeRecord, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if r, ok := s.nodes.get(name); ok {
		r.LatestRound = s.latestNodeRound
		return r, true
	}
	var byClaim NodeRecord
	found := false
	s.nodes.each(func(r NodeRecord) bool {
		if r.NodeClaim == name {
			byClaim, found = r, true
		}
		return !found
	})
	byClaim.LatestRound = s.latestNodeRound
	return byClaim, found
}

// Pods returns every pod record, by namespace and name.
func (s *Store) Pods() []PodRecord {
	s.mu.RLock()
	out := make([]PodRecord, 0, s.pods.len())
	s.pods.each(func(r PodRecord) bool { out = append(out, r); return true })
	s.mu.RUnlock()
	sort.Slice(out, func(i, j int) bool {
		return out[i].Namespace+"/"+out[i].Name < out[j].Namespace+"/"+out[j].Name
	})
	return out
}

// Nodes returns every node record, by name.
func (s *Store) Nodes() []NodeRecord {
	s.mu.RLock()
	out := make([]NodeRecord, 0, s.nodes.len())
	s.nodes.each(func(r NodeRecord) bool { r.LatestRound = s.latestNodeRound; out = append(out, r); return true })
	s.mu.RUnlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Node < out[j].Node })
	return out
}
