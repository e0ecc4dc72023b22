// Package externalscaler asks scalers that speak KEDA's external-scaler
// gRPC protocol how much headroom their pools want, and keeps the latest
// answer per pool for provisioning and disruption to read. When a scaler
// cannot be reached, its last answer stands for the pool's grace period,
// then the pool's floor, and the pool's ExternalHeadroom condition says
// so.
package externalscaler

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"math"
	"net"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/claimscale/claimscale/api/v1alpha1"
	pb "github.com/claimscale/claimscale/internal/externalscaler/protos"
	"github.com/claimscale/claimscale/internal/statusapply"
)

// Name of the poller in logs.
const Name = "externalscaler"

// ConditionExternalHeadroom is v1alpha1.ConditionExternalHeadroom.
const ConditionExternalHeadroom = v1alpha1.ConditionExternalHeadroom

const (
	reasonAnswering   = v1alpha1.ReasonScalerAnswering
	reasonUnreachable = v1alpha1.ReasonExternalScalerUnreachable
)

// DefaultInterval between two questions to a pool's scaler.
const DefaultInterval = 10 * time.Second

// DefaultGracePeriod is a pool's grace period when it sets none.
const DefaultGracePeriod = 5 * time.Minute

// Poller asks each pool's scaler every Interval and keeps the answers.
type Poller struct {
	Kube  client.Client
	Clock clock.WithTicker
	// Interval between rounds (default DefaultInterval); each call is
	// bounded by it too.
	Interval time.Duration
	// Changed, if set, is called when a pool's count changes.
	Changed func()

	mu       sync.Mutex
	readings map[string]reading
	// counts are each pool's count at the end of the last round.
	counts map[string]int32
	conns  map[string]*grpc.ClientConn
}

// reading is the last answer of a pool's scaler.
type reading struct {
	uid types.UID
	// count is the last answer, clamped; ok once there is one.
	count int32
	ok    bool
	// at is when the scaler last answered.
	at time.Time
	// failing is the last error, nil while the scaler answers.
	failing error
}

// NeedLeaderElection: only the leader polls, as only its provisioning and
// disruption read the answers, and one writer keeps the pools' conditions
// steady. A new leader's pools are at their floor until its first round,
// an interval at the most.
func (p *Poller) NeedLeaderElection() bool { return true }

// Start polls until the context ends.
func (p *Poller) Start(ctx context.Context) error {
	if p.Clock == nil {
		p.Clock = clock.RealClock{}
	}
	if p.Interval <= 0 {
		p.Interval = DefaultInterval
	}
	ctx = log.IntoContext(ctx, log.FromContext(ctx).WithName(Name))
	defer p.closeAll()
	ticker := p.Clock.NewTicker(p.Interval)
	defer ticker.Stop()
	for {
		p.Poll(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C():
		}
	}
}

// Poll asks every pool with an external headroom once.
func (p *Poller) Poll(ctx context.Context) {
	var pools v1alpha1.NodePoolList
	if err := p.Kube.List(ctx, &pools); err != nil {
		log.FromContext(ctx).Error(err, "listing pools")
		return
	}
	seen := map[string]bool{}
	var wg sync.WaitGroup
	for i := range pools.Items {
		pool := &pools.Items[i]
		if pool.Spec.Headroom == nil || pool.Spec.Headroom.External == nil || !pool.DeletionTimestamp.IsZero() {
			p.forget(ctx, pool)
			continue
		}
		seen[pool.Name] = true
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.pollPool(ctx, pool)
		}()
	}
	wg.Wait()
	p.mu.Lock()
	for name := range p.readings {
		if !seen[name] {
			delete(p.readings, name)
			delete(p.counts, name)
		}
	}
	p.mu.Unlock()
}

func (p *Poller) pollPool(ctx context.Context, pool *v1alpha1.NodePool) {
	external := pool.Spec.Headroom.External
	callCtx, cancel := context.WithTimeout(ctx, p.Interval)
	defer cancel()
	answer, err := p.ask(callCtx, pool, external)
	now := p.Clock.Now()
	p.mu.Lock()
	if p.readings == nil {
		p.readings = map[string]reading{}
	}
	last := p.readings[pool.Name]
	if last.uid != pool.UID {
		last = reading{uid: pool.UID}
	}
	if err == nil {
		last.count, last.ok, last.at, last.failing = answer, true, now, nil
	} else {
		last.failing = err
	}
	before, seen := p.counts[pool.Name]
	p.readings[pool.Name] = last
	p.mu.Unlock()
	// Compared with the count of the last round, not the last answer: the
	// end of a grace period changes the count too.
	count, _ := p.Count(pool)
	p.mu.Lock()
	if p.counts == nil {
		p.counts = map[string]int32{}
	}
	p.counts[pool.Name] = count
	p.mu.Unlock()
	if (!seen || count != before) && p.Changed != nil {
		p.Changed()
	}
	p.report(ctx, pool, last, now)
}

// ask asks a scaler: inactive means the floor; else ceil(metric / target)
// within [min, max].
func (p *Poller) ask(ctx context.Context, pool *v1alpha1.NodePool, external *v1alpha1.ExternalHeadroom) (int32, error) {
	conn, err := p.conn(external)
	if err != nil {
		return 0, err
	}
	scaler := pb.NewExternalScalerClient(conn)
	ref := &pb.ScaledObjectRef{Name: pool.Name, ScalerMetadata: external.Metadata}
	active, err := scaler.IsActive(ctx, ref)
	if err != nil {
		return 0, fmt.Errorf("IsActive: %w", err)
	}
	if !active.GetResult() {
		return external.Min, nil
	}
	spec, err := scaler.GetMetricSpec(ctx, ref)
	if err != nil {
		return 0, fmt.Errorf("GetMetricSpec: %w", err)
	}
	if len(spec.GetMetricSpecs()) == 0 {
		return 0, errors.New("GetMetricSpec named no metric")
	}
	name := spec.GetMetricSpecs()[0].GetMetricName()
	metrics, err := scaler.GetMetrics(ctx, &pb.GetMetricsRequest{ScaledObjectRef: ref, MetricName: name})
	if err != nil {
		return 0, fmt.Errorf("GetMetrics %s: %w", name, err)
	}
	value, ok := metricValue(metrics, name)
	if !ok {
		return 0, fmt.Errorf("GetMetrics returned no value of %s", name)
	}
	return Count(value, external), nil
}

// metricValue is the value of the named metric (or the only one), in
// KEDA's float field, else its deprecated integer field.
func metricValue(response *pb.GetMetricsResponse, name string) (float64, bool) {
	values := response.GetMetricValues()
	for _, value := range values {
		if value.GetMetricName() == name || len(values) == 1 {
			if value.GetMetricValueFloat() != 0 {
				return value.GetMetricValueFloat(), true
			}
			return float64(value.GetMetricValue()), true
		}
	}
	return 0, false
}

// Count is ceil(metric / target) within [min, max]; a metric that is no
// number (NaN) is the floor.
func Count(metric float64, external *v1alpha1.ExternalHeadroom) int32 {
	target := external.TargetPerNode
	if target == nil {
		target = external.TargetPerPod
	}
	if target == nil || target.AsApproximateFloat64() <= 0 || math.IsNaN(metric) {
		return external.Min
	}
	wanted := math.Ceil(metric / target.AsApproximateFloat64())
	return int32(max(float64(external.Min), min(float64(external.Max), wanted)))
}

// conn is the connection to a scaler, made once per address and security.
func (p *Poller) conn(external *v1alpha1.ExternalHeadroom) (*grpc.ClientConn, error) {
	key := "plain/" + external.Address
	creds := insecure.NewCredentials()
	if external.TLS != nil {
		serverName := external.TLS.ServerName
		if serverName == "" {
			host, _, err := net.SplitHostPort(external.Address)
			if err != nil {
				return nil, fmt.Errorf("reading address %q: %w", external.Address, err)
			}
			serverName = host
		}
		key = "tls/" + serverName + "/" + external.Address
		creds = credentials.NewTLS(&tls.Config{ServerName: serverName, MinVersion: tls.VersionTLS12})
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if conn, ok := p.conns[key]; ok {
		return conn, nil
	}
	conn, err := grpc.NewClient("passthrough:///"+external.Address, grpc.WithTransportCredentials(creds))
	if err != nil {
		return nil, fmt.Errorf("connecting to scaler %s: %w", external.Address, err)
	}
	if p.conns == nil {
		p.conns = map[string]*grpc.ClientConn{}
	}
	p.conns[key] = conn
	return conn, nil
}

func (p *Poller) closeAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for key, conn := range p.conns {
		_ = conn.Close()
		delete(p.conns, key)
	}
}

// Count is the headroom a pool's scaler asks for now: its last answer,
// or, once the scaler has not answered for the grace period (or never
// has), the floor. known is false until the scaler was first asked.
func (p *Poller) Count(pool *v1alpha1.NodePool) (count int32, known bool) {
	if pool.Spec.Headroom == nil || pool.Spec.Headroom.External == nil {
		return 0, true
	}
	external := pool.Spec.Headroom.External
	p.mu.Lock()
	last, ok := p.readings[pool.Name]
	p.mu.Unlock()
	if !ok || last.uid != pool.UID {
		return external.Min, false
	}
	if !last.ok || (last.failing != nil && p.now().Sub(last.at) > gracePeriod(external)) {
		return external.Min, true
	}
	return max(external.Min, min(external.Max, last.count)), true
}

func (p *Poller) now() time.Time {
	if p.Clock == nil {
		return time.Now()
	}
	return p.Clock.Now()
}

func gracePeriod(external *v1alpha1.ExternalHeadroom) time.Duration {
	if external.GracePeriod != nil {
		return external.GracePeriod.Duration
	}
	return DefaultGracePeriod
}

// report sets the pool's ExternalHeadroom condition, when it changes.
func (p *Poller) report(ctx context.Context, pool *v1alpha1.NodePool, last reading, now time.Time) {
	condition := metav1.Condition{Type: ConditionExternalHeadroom, Status: metav1.ConditionTrue, Reason: reasonAnswering,
		Message: fmt.Sprintf("scaler %s asks for %d", pool.Spec.Headroom.External.Address, last.count), ObservedGeneration: pool.Generation}
	if last.failing != nil {
		condition.Status, condition.Reason = metav1.ConditionFalse, reasonUnreachable
		grace := gracePeriod(pool.Spec.Headroom.External)
		switch {
		case !last.ok:
			condition.Message = fmt.Sprintf("scaler %s has not answered yet (%v); headroom is the floor of %d", pool.Spec.Headroom.External.Address, last.failing, pool.Spec.Headroom.External.Min)
		case now.Sub(last.at) <= grace:
			condition.Message = fmt.Sprintf("scaler %s does not answer (%v); its last answer of %d stands until %s", pool.Spec.Headroom.External.Address, last.failing, last.count, last.at.Add(grace).UTC().Format(time.RFC3339))
		default:
			condition.Message = fmt.Sprintf("scaler %s has not answered since %s (%v); headroom is the floor of %d", pool.Spec.Headroom.External.Address, last.at.UTC().Format(time.RFC3339), last.failing, pool.Spec.Headroom.External.Min)
		}
	}
	if existing := meta.FindStatusCondition(pool.Status.Conditions, ConditionExternalHeadroom); existing != nil &&
		existing.Status == condition.Status && existing.Reason == condition.Reason && existing.Message == condition.Message {
		return
	}
	if existing := meta.FindStatusCondition(pool.Status.Conditions, ConditionExternalHeadroom); existing != nil && existing.Status == condition.Status {
		condition.LastTransitionTime = existing.LastTransitionTime
	} else {
		condition.LastTransitionTime = metav1.NewTime(now)
	}
	if err := p.applyCondition(ctx, pool, &condition); err != nil {
		log.FromContext(ctx).V(1).Info("setting the ExternalHeadroom condition failed; next round tries again", "nodePool", pool.Name, "error", err.Error())
	}
}

// forget takes the ExternalHeadroom condition off a pool that no longer
// has an external headroom: it would speak of a scaler nobody asks.
func (p *Poller) forget(ctx context.Context, pool *v1alpha1.NodePool) {
	if !pool.DeletionTimestamp.IsZero() || meta.FindStatusCondition(pool.Status.Conditions, ConditionExternalHeadroom) == nil {
		return
	}
	// Applying the condition first takes it over from whoever wrote it
	// last (a version that patched it), so that applying none removes it.
	existing := meta.FindStatusCondition(pool.Status.Conditions, ConditionExternalHeadroom)
	if err := p.applyCondition(ctx, pool, existing); err != nil {
		log.FromContext(ctx).V(1).Info("removing the ExternalHeadroom condition failed; next round tries again", "nodePool", pool.Name, "error", err.Error())
		return
	}
	if err := p.applyCondition(ctx, pool, nil); err != nil {
		log.FromContext(ctx).V(1).Info("removing the ExternalHeadroom condition failed; next round tries again", "nodePool", pool.Name, "error", err.Error())
	}
}

// applyCondition writes the pool's ExternalHeadroom condition by
// server-side apply under the poller's own field manager, the one status
// field it owns; nil removes it. The pool's other conditions belong to
// other writers and are left alone.
func (p *Poller) applyCondition(ctx context.Context, pool *v1alpha1.NodePool, condition *metav1.Condition) error {
	var owned headroomStatus
	if condition != nil {
		owned.Conditions = []metav1.Condition{*condition}
	}
	_, err := statusapply.Apply(ctx, p.Kube, "NodePool", pool.Name, &owned, Name)
	return err
}

// headroomStatus is the part of a NodePool's status the poller owns. Not
// a NodePoolStatus: that always carries the node count, which the nodepool
// controller owns.
type headroomStatus struct {
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}
