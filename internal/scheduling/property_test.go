package scheduling

import (
	"context"
	"fmt"
	"runtime"
	"sort"
	"testing"

	corev1 "k8s.io/api/core/v1"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/scheduler/framework"
)

// randomWorkload is a small cluster and pending pods drawn from seed:
// two pools (one tainted, both over zones), and Deployments with random
// sizes, node selectors, tolerations, spread over zones and hostnames,
// zone affinity and hostname anti-affinity.
func randomWorkload(seed int) (Cluster, []*corev1.Pod) {
	rnd := lcg(seed)
	c := Cluster{Pools: []Pool{
		nodePool("general", catalog(20+rnd.next(60)), weight(10), zones("a", "b", "c")),
		nodePool("tainted", []Shape{shape("t8", "8", "32Gi", 4), shape("t16", "16", "64Gi", 8)}, zones("a", "b"),
			poolTaint("dedicated", "batch"), poolLabels("tier", "batch")),
	}}
	var pending []*corev1.Pod
	deployments := 2 + rnd.next(8)
	for d := 0; d < deployments; d++ {
		name := fmt.Sprintf("s%d-d%d", seed, d)
		cpu := fmt.Sprintf("%dm", 50+rnd.next(40)*50)
		mem := fmt.Sprintf("%dMi", 64*(1+rnd.next(64)))
		var opts []podOpt
		switch rnd.next(7) {
		case 1:
			opts = append(opts, spread(corev1.LabelTopologyZone, 1, name))
		case 5:
			opts = append(opts, spread(corev1.LabelHostname, 1+int32(rnd.next(3)), name))
		case 2:
			opts = append(opts, groupAntiAffinity(fmt.Sprintf("s%d-anti", seed)))
		case 3:
			if d > 0 {
				opts = append(opts, podAffinity(corev1.LabelTopologyZone, fmt.Sprintf("s%d-d0", seed)))
			}
		case 4:
			opts = append(opts, podAntiAffinity(corev1.LabelHostname, name))
		}
		if rnd.next(4) == 0 {
			opts = append(opts, tolerate("dedicated"), nodeSelector("tier", "batch"))
		}
		pending = append(pending, pods(1+rnd.next(25), name, cpu, mem, opts...)...)
	}
	return c, pending
}

// replay checks a decision against the Filter plugins: the new nodes,
// built from their pools' templates, and every pod on them; then each pod
// in turn is taken off its node and must pass PreFilter and Filter of
// every plugin there, with all other pods in place (the state the
// kube-scheduler sees once the nodes have joined).
func replay(t *testing.T, c Cluster, r Result) {
	t.Helper()
	ctx := context.Background()
	pools := map[string]*Pool{}
	for i := range c.Pools {
		pools[c.Pools[i].NodePool.Name] = &c.Pools[i]
	}
	snap := NewSnapshot()
	objs, err := newObjectStore(&c)
	if err != nil {
		t.Fatal(err)
	}
	fw, err := newFrameworks(ctx, snap, objs)
	if err != nil {
		t.Fatal(err)
	}
	type bound struct {
		pod  *corev1.Pod
		node string
	}
	var all []bound
	for _, n := range r.NewNodes {
		node, err := TemplateNode(pools[n.Pool].NodePool, n.Shape, n.Zone, n.Name)
		if err != nil {
			t.Fatal(err)
		}
		if err := snap.AddNode(node); err != nil {
			t.Fatal(err)
		}
		for _, p := range n.Pods {
			all = append(all, bound{p, n.Name})
		}
	}
	for _, b := range all {
		if err := snap.AddPod(b.pod, b.node); err != nil {
			t.Fatal(err)
		}
	}
	for _, b := range all {
		if err := snap.RemovePod(b.pod, b.node); err != nil {
			t.Fatal(err)
		}
		state := framework.NewCycleState()
		_, st, _ := fw.full.RunPreFilterPlugins(ctx, state, b.pod)
		if st.IsSuccess() {
			st = fw.full.RunFilterPlugins(ctx, state, b.pod, snap.lookup(b.node))
		}
		if !st.IsSuccess() {
			t.Errorf("pod %s on %s fails the filters: %s", b.pod.Name, b.node, st.Message())
		}
		if err := snap.AddPod(b.pod, b.node); err != nil {
			t.Fatal(err)
		}
	}
}

// nodeBound is, per pool, the larger of what plain first-fit-decreasing
// needs for the pods the pool got (by cpu, memory and pod slots on the
// pool's largest shape, constraints ignored) and what the constraints
// alone force (requiredMinimum), summed over the pools.
func nodeBound(s *Simulator, r Result) (bound, ffd int) {
	byPool := map[string][]*corev1.Pod{}
	for _, n := range r.NewNodes {
		byPool[n.Pool] = append(byPool[n.Pool], n.Pods...)
	}
	for name, pods := range byPool {
		p := s.poolByName[name]
		var capacity *shapeInfo
		for _, si := range p.shapes {
			if capacity == nil || !si.alloc.le(capacity.alloc) {
				capacity = si
			}
		}
		reqs := make([]vec, len(pods))
		for i, pod := range pods {
			reqs[i] = vecOfList(pod.Spec.Containers[0].Resources.Requests)
		}
		sort.SliceStable(reqs, func(i, j int) bool {
			return max(reqs[i].cpu*capacity.alloc.mem, reqs[i].mem*capacity.alloc.cpu) > max(reqs[j].cpu*capacity.alloc.mem, reqs[j].mem*capacity.alloc.cpu)
		})
		var bins []vec
		var slots []int64
		for _, q := range reqs {
			placed := false
			for i := range bins {
				if bins[i].add(q).le(capacity.alloc) && slots[i] < capacity.allocPods {
					bins[i], slots[i], placed = bins[i].add(q), slots[i]+1, true
					break
				}
			}
			if !placed {
				bins, slots = append(bins, q), append(slots, 1)
			}
		}
		ffd += len(bins)
		bound += max(len(bins), requiredMinimum(pods, len(p.zones)), shutOutMinimum(s, r, name, pods))
	}
	return bound, ffd
}

// shutOutMinimum is what hostname spread forces in a pool when a node of
// another pool in the decision is a domain for a Deployment's pods (its
// node selector admits the node; taints count for nothing under the
// default nodeTaintsPolicy) but does not tolerate them: that node holds
// none of them, so no node holds more than maxSkew, and the Deployment's
// n pods need n/maxSkew nodes.
func shutOutMinimum(s *Simulator, r Result, pool string, pods []*corev1.Pod) int {
	var others []*corev1.Node
	for _, n := range r.NewNodes {
		if n.Pool == pool {
			continue
		}
		node, err := TemplateNode(s.poolByName[n.Pool].pool, n.Shape, n.Zone, n.Name)
		if err != nil {
			panic(err)
		}
		others = append(others, node)
	}
	perApp := map[string]int{}
	skew := map[string]int{}
	for _, p := range pods {
		for _, c := range p.Spec.TopologySpreadConstraints {
			if c.TopologyKey != corev1.LabelHostname {
				continue
			}
			app := p.Labels["app"]
			if _, seen := skew[app]; !seen {
				skew[app] = 0
				required := nodeaffinity.GetRequiredNodeAffinity(p)
				for _, node := range others {
					if ok, _ := required.Match(node); ok && !toleratesAll(p, node.Spec.Taints) {
						skew[app] = int(c.MaxSkew)
						break
					}
				}
			}
			perApp[app]++
		}
	}
	most := 0
	for app, n := range perApp {
		if k := skew[app]; k > 0 {
			most = max(most, (n+k-1)/k)
		}
	}
	return most
}

func toleratesAll(p *corev1.Pod, taints []corev1.Taint) bool {
	_, untolerated := corev1helpers.FindMatchingUntoleratedTaint(klog.Background(), taints, p.Spec.Tolerations,
		func(t *corev1.Taint) bool {
			return t.Effect == corev1.TaintEffectNoSchedule || t.Effect == corev1.TaintEffectNoExecute
		}, false)
	return !untolerated
}

// requiredMinimum is the fewest nodes the constraints alone force: the
// largest group of mutually anti-affine pods, and for zone spread as many
// zones as the Deployment has pods (up to the pool's zones).
func requiredMinimum(pending []*corev1.Pod, zones int) int {
	most := antiAffinityMinimum(pending)
	perApp := map[string]int{}
	for _, p := range pending {
		for _, c := range p.Spec.TopologySpreadConstraints {
			if c.TopologyKey == corev1.LabelTopologyZone {
				perApp[p.Labels["app"]]++
			}
		}
	}
	for _, n := range perApp {
		most = max(most, min(n, zones))
	}
	return most
}

func TestRandomWorkloadsPassTheFiltersAndNeedNoExtraNodes(t *testing.T) {
	for seed := 1; seed <= 40; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			c, pending := randomWorkload(seed)
			s, err := New(context.Background(), c)
			if err != nil {
				t.Fatal(err)
			}
			r, err := s.Solve(context.Background(), pending)
			if err != nil {
				t.Fatal(err)
			}
			if len(r.Unschedulable) > 0 {
				t.Errorf("%d unschedulable, first: %s: %s", len(r.Unschedulable), r.Unschedulable[0].Pod.Name, r.Unschedulable[0].Reason)
			}
			replay(t, c, r)
			if bound, ffd := nodeBound(s, r); len(r.NewNodes) > bound {
				t.Errorf("%d nodes (%v); first-fit-decreasing needs %d, with what the constraints force %d", len(r.NewNodes), newNodes(r), ffd, bound)
			}
		})
	}
}

// The same input gives the same decision whatever the number of threads:
// constrained pods, and plain pods that are re-packed.
func TestSolveIsDeterministicAcrossThreadCounts(t *testing.T) {
	for name, workload := range map[string]func() (Cluster, []*corev1.Pod){
		"constrained":   func() (Cluster, []*corev1.Pod) { return constrainedWorkload(500) },
		"complementary": func() (Cluster, []*corev1.Pod) { return complementaryDeployments(60) },
		// Classes built in parallel (classifyAll).
		"diverse": func() (Cluster, []*corev1.Pod) { return diverseWorkload(1000) },
	} {
		t.Run(name, func(t *testing.T) {
			c, pending := workload()
			decide := func(procs int) string {
				defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(procs))
				return describeResult(solve(t, c, pending))
			}
			one, many := decide(1), decide(8)
			if one != many {
				t.Errorf("GOMAXPROCS 1 and 8 decide differently:\n%s\nvs\n%s", one, many)
			}
		})
	}
}
