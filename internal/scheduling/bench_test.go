package scheduling

import (
	"context"
	"fmt"
	"math"
	"runtime"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/claimscale/claimscale/api/v1alpha1"
)

func metaName(n string) metav1.ObjectMeta { return metav1.ObjectMeta{Name: n} }

// lcg is a tiny deterministic generator, so workloads are the same on every
// run.
type lcg uint64

func (l *lcg) next(n int) int {
	*l = *l*6364136223846793005 + 1442695040888963407
	return int(uint64(*l>>33) % uint64(n))
}

// identicalWorkload is n pods of 500m / 1Gi in four Deployments on one pool
// of 8 cpu / 32 GiB / 110 pods.
func identicalWorkload(n int) (Cluster, []*corev1.Pod) {
	c := Cluster{Pools: []Pool{nodePool("default", []Shape{shape("c8", "8", "32Gi", 8)})}}
	var pending []*corev1.Pod
	for d := 0; d < 4; d++ {
		pending = append(pending, pods(n/4, fmt.Sprintf("deploy-%d", d), "500m", "1Gi")...)
	}
	return c, pending
}

// mixedPools are three pools with different shapes and taints, in three
// zones.
func mixedPools() []Pool {
	return []Pool{
		nodePool("general", []Shape{
			shape("g2", "2", "8Gi", 2), shape("g4", "4", "16Gi", 4), shape("g8", "8", "32Gi", 8), shape("g16", "16", "64Gi", 16),
		}, weight(50), zones("a", "b", "c")),
		nodePool("highmem", []Shape{
			shape("m4", "4", "32Gi", 6), shape("m8", "8", "64Gi", 12),
		}, weight(20), zones("a", "b", "c"), poolTaint("workload", "highmem")),
		nodePool("batch", []Shape{
			shape("b16", "16", "32Gi", 10), shape("b32", "32", "64Gi", 20),
		}, weight(10), zones("a", "b", "c"), poolTaint("workload", "batch")),
	}
}

// mixedWorkload is n pods in deployments Deployments: requests 100m–2 cpu
// and 128Mi–4Gi; a fifth of the Deployments spread over zones, a fifth
// keep one pod per node by anti-affinity; some tolerate the highmem or
// batch taints and select those pools.
func mixedWorkload(n, deployments int) (Cluster, []*corev1.Pod) {
	c := Cluster{Pools: mixedPools()}
	rnd := lcg(42)
	var pending []*corev1.Pod
	per := n / deployments
	for d := 0; d < deployments; d++ {
		name := fmt.Sprintf("app-%03d", d)
		cpu := fmt.Sprintf("%dm", 100+rnd.next(20)*100)
		mem := fmt.Sprintf("%dMi", 128*(1+rnd.next(32)))
		var opts []podOpt
		switch d % 5 {
		case 0:
			opts = append(opts, spread(corev1.LabelTopologyZone, 1, name))
		case 1:
			opts = append(opts, podAntiAffinity(corev1.LabelHostname, name))
		}
		switch d % 7 {
		case 3:
			opts = append(opts, tolerate("workload"), nodeSelector(v1alpha1.LabelNodePool, "highmem"))
		case 5:
			opts = append(opts, tolerate("workload"), nodeSelector(v1alpha1.LabelNodePool, "batch"))
		}
		pending = append(pending, pods(per, name, cpu, mem, opts...)...)
	}
	return c, pending
}

// existingCluster adds 1,000 nodes carrying 20,000 pods to a cluster.
func existingCluster(c Cluster) Cluster {
	rnd := lcg(7)
	zs := []string{"a", "b", "c"}
	for i := 0; i < 1000; i++ {
		c.Nodes = append(c.Nodes, node(fmt.Sprintf("worker-%04d", i), "16", "64Gi", map[string]string{
			corev1.LabelTopologyZone: zs[i%3], v1alpha1.LabelNodePool: "general",
			corev1.LabelInstanceTypeStable: "g16",
		}))
	}
	for d := 0; d < 200; d++ {
		name := fmt.Sprintf("running-%03d", d)
		cpu := fmt.Sprintf("%dm", 100+rnd.next(5)*100)
		mem := fmt.Sprintf("%dMi", 128*(1+rnd.next(8)))
		var opts []podOpt
		if d%5 == 1 {
			opts = append(opts, podAntiAffinity(corev1.LabelHostname, name))
		}
		for i, p := range pods(100, name, cpu, mem, opts...) {
			onNode(fmt.Sprintf("worker-%04d", (d*100+i*10+d)%1000))(p)
			c.Pods = append(c.Pods, p)
		}
	}
	return c
}

// binpackingWorkload is the cluster-autoscaler's published binpacking case:
// 50,000 pods of 50m / 100 MB and 1,000 of 95m / 190 MB on nodes of
// 1000m / 5000 MB / 100 pods. The lower bound, and the answer, is 2,595.
func binpackingWorkload() (Cluster, []*corev1.Pod) {
	c := Cluster{Pools: []Pool{nodePool("default", []Shape{shape("ca", "1000m", "5000M", 1)}, maxPodsOpt(100), noEviction())}}
	pending := append(pods(50000, "small", "50m", "100M"), pods(1000, "large", "95m", "190M")...)
	return c, pending
}

// lowerBound is Σ over pools of the larger of max(⌈Σcpu/alloc⌉,
// ⌈Σmem/alloc⌉, ⌈pods/maxPods⌉, ⌈Σdevice/alloc⌉ per device) of the pods on the pool's new nodes,
// against the pool's largest shape, and the largest group of those pods
// that must each have a node of their own (antiAffinityMinimum). It holds
// where the pods' selectors and tolerations admit only the pool they got,
// as in the workloads here: mixedWorkload's anti-affine Deployment of the
// batch pool needs 100 batch nodes where the pool's resources need 47.
func lowerBound(s *Simulator, r Result) int {
	type sum struct {
		cpu, mem, pods int64
		ext            *scalars
		all            []*corev1.Pod
	}
	sums := map[string]*sum{}
	for _, n := range r.NewNodes {
		if sums[n.Pool] == nil {
			sums[n.Pool] = &sum{}
		}
		sums[n.Pool].cpu += n.Requests.Cpu().MilliValue()
		sums[n.Pool].mem += n.Requests.Memory().Value()
		sums[n.Pool].pods += int64(len(n.Pods))
		sums[n.Pool].ext = combine(sums[n.Pool].ext, scalarsOfList(n.Requests), 1)
		sums[n.Pool].all = append(sums[n.Pool].all, n.Pods...)
	}
	lb := 0
	for name, sm := range sums {
		p := s.poolByName[name]
		var alloc vec
		var ext *scalars
		var pods int64
		for _, si := range p.shapes {
			alloc = vec{cpu: max(alloc.cpu, si.alloc.cpu), mem: max(alloc.mem, si.alloc.mem)}
			ext = maxScalars(ext, si.ext)
			pods = max(pods, si.allocPods)
		}
		need := max(ceilDiv(sm.cpu, alloc.cpu), ceilDiv(sm.mem, alloc.mem), ceilDiv(sm.pods, pods))
		for i, name := range sm.ext.namesOrNil() {
			need = max(need, ceilDiv(sm.ext.counts[i], ext.get(name)))
		}
		lb += max(int(need), antiAffinityMinimum(sm.all))
	}
	return lb
}

func benchmarkSolve(b *testing.B, c Cluster, pending []*corev1.Pod) {
	ctx := context.Background()
	var r Result
	var s *Simulator
	// Collect the workload generator's garbage now, so that its cost is
	// not charged to the decision.
	runtime.GC()
	b.ResetTimer()
	cpuStart := cpuTime()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		var err error
		if s, err = New(ctx, c); err != nil {
			b.Fatal(err)
		}
		if r, err = s.Solve(ctx, pending); err != nil {
			b.Fatal(err)
		}
	}
	elapsed := time.Since(start) / time.Duration(b.N)
	cpu := (cpuTime() - cpuStart) / time.Duration(b.N)
	b.StopTimer()
	lb := max(lowerBound(s, r), antiAffinityMinimum(pending))
	b.ReportMetric(cpu.Seconds(), "cpu-s/op")
	b.ReportMetric(float64(len(pending))/elapsed.Seconds(), "pods/s")
	b.ReportMetric(float64(len(r.NewNodes)), "nodes")
	b.ReportMetric(float64(len(r.Unschedulable)), "unschedulable")
	if lb > 0 {
		b.ReportMetric(math.Round(float64(len(r.NewNodes))/float64(lb)*1000)/1000, "nodes/lowerbound")
	}
	if clb := costLowerBound(s, r); clb > 0 && len(s.pools) == 1 {
		b.ReportMetric(math.Round(cost(r)/clb*1000)/1000, "cost/lowerbound")
	}
}

func BenchmarkIdentical1k(b *testing.B) {
	c, p := identicalWorkload(1000)
	benchmarkSolve(b, c, p)
}

func BenchmarkIdentical5k(b *testing.B) {
	c, p := identicalWorkload(5000)
	benchmarkSolve(b, c, p)
}

func BenchmarkIdentical10k(b *testing.B) {
	c, p := identicalWorkload(10000)
	benchmarkSolve(b, c, p)
}

func BenchmarkMixed10k(b *testing.B) {
	c, p := mixedWorkload(10000, 100)
	benchmarkSolve(b, c, p)
}

func BenchmarkMixed10kOnExistingCluster(b *testing.B) {
	c, p := mixedWorkload(10000, 100)
	benchmarkSolve(b, existingCluster(c), p)
}

func BenchmarkBinpacking51k(b *testing.B) {
	c, p := binpackingWorkload()
	benchmarkSolve(b, c, p)
}

// The mixed three-pool workload is within 3 % of its lower bound. (It
// was 8 % above the bound that left out that an anti-affine Deployment
// of the batch pool needs a batch node per pod: the nodes were 0.5 %
// above the bound all along.)
func TestMixedWorkloadPacksWithinThreePercentOfTheLowerBound(t *testing.T) {
	if testing.Short() {
		t.Skip("10,000 pods")
	}
	c, pending := mixedWorkload(10000, 100)
	s, err := New(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	r, err := s.Solve(context.Background(), pending)
	if err != nil {
		t.Fatal(err)
	}
	if lb := lowerBound(s, r); len(r.NewNodes) > lb*103/100 || len(r.Unschedulable) != 0 {
		t.Errorf("%d nodes, %d unschedulable; lower bound %d", len(r.NewNodes), len(r.Unschedulable), lb)
	}
}

// The binpacking case is also a test: its answer is known.
func TestBinpackingReachesTheLowerBound(t *testing.T) {
	if testing.Short() {
		t.Skip("51,000 pods")
	}
	c, pending := binpackingWorkload()
	s, err := New(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	r, err := s.Solve(context.Background(), pending)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.NewNodes) != 2595 || len(r.Unschedulable) != 0 {
		t.Errorf("%d nodes, %d unschedulable; want 2595 nodes and none unschedulable", len(r.NewNodes), len(r.Unschedulable))
	}
	if lb := lowerBound(s, r); lb != 2595 {
		t.Errorf("lower bound = %d, want 2595", lb)
	}
}

// cpuTime is the CPU time the process has used, all threads: what a
// decision costs on a machine shared with other work, where wall time
// says little.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// ceilDiv for non-negative numerators and positive denominators.
func ceilDiv(a, b int64) int64 {
	if b <= 0 {
		return math.MaxInt64
	}
	return (a + b - 1) / b
}
