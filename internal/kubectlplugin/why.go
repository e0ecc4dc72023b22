package kubectlplugin

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	autoscalingv1 "github.com/claimscale/claimscale/api/autoscaling/v1"
	"github.com/claimscale/claimscale/internal/clusterstate"
	"github.com/claimscale/claimscale/internal/decisions"
	"github.com/claimscale/claimscale/internal/scheduling"
)

func newWhyCommand(o *options) *cobra.Command {
	var output string
	var allNamespaces bool
	cmd := &cobra.Command{
		Use:   "why (pod NAME | pods [-A] | node NAME | nodeclaim NAME | provisioningrequest NAME)",
		Short: "Say why claimscale placed or did not place a pod, or keeps or removes a node",
		Long: `why answers from the controller's decision records, checked against the cluster as it is now:
a pod that is gone or has since been scheduled says so, and a node whose record a later round no
longer repeats is answered as a disruption round would decide it now.

KIND/NAME and KIND NAME are the same; "why pods" lists every pending pod of the namespace (-A: of
every namespace) with its latest decision. "why provisioningrequest" says where a ProvisioningRequest
of the namespace stands and why it is not provisioned; a node or pod bought or booked for one says
"for ProvisioningRequest NAMESPACE/NAME".`,
		Example: `  kubectl claimscale why pod/web-7d9f -n shop
  kubectl claimscale why pod web-7d9f -n shop -o yaml
  kubectl claimscale why pods -A
  kubectl claimscale why provisioningrequest/train-job -n ml
  kubectl claimscale why node/general-x2k9q
  kubectl claimscale why node general-x2k9q --endpoint https://127.0.0.1:8443 --insecure-skip-endpoint-verify`,
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutput(output); err != nil {
				return err
			}
			kind, name, ok := strings.Cut(args[0], "/")
			if !ok && len(args) == 2 {
				name = args[1]
			} else if len(args) == 2 {
				return fmt.Errorf("give KIND/NAME or KIND NAME, not %q and %q", args[0], args[1])
			}
			kind = strings.ToLower(kind)
			if name == "" && kind != "pods" && kind != "po" {
				return fmt.Errorf("%q names no object: give pod NAME, pods, node NAME, nodeclaim NAME or provisioningrequest NAME", args[0])
			}
			switch kind {
			case "pod", "pods", "po":
				if name == "" {
					return o.whyPendingPods(cmd.Context(), allNamespaces, output)
				}
				return o.whyPod(cmd.Context(), name, output)
			case "node", "nodes", "no", "nodeclaim", "nodeclaims":
				return o.whyNode(cmd.Context(), kind, name, output)
			case "provisioningrequest", "provisioningrequests", "provreq", "provreqs":
				return o.whyProvisioningRequest(cmd.Context(), name, output)
			}
			return fmt.Errorf("kind %q: want pod, pods, node, nodeclaim or provisioningrequest", kind)
		},
	}
	cmd.Flags().BoolVarP(&allNamespaces, "all-namespaces", "A", false, "with pods: the pending pods of every namespace")
	addOutputFlag(cmd, &output)
	return cmd
}

// PodAnswer is why pod's answer, as -o json|yaml print it: the latest
// record, if any, and what became of the pod since.
type PodAnswer struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// Exists is false for a pod that is gone (or never was).
	Exists bool `json:"exists"`
	// NodeName is the node the pod is bound to now, if it is.
	NodeName string               `json:"nodeName,omitempty"`
	Record   *decisions.PodRecord `json:"record,omitempty"`
	// ProvisioningRequest is the request (namespace/name) whose capacity
	// the pod uses, if it says so.
	ProvisioningRequest string `json:"provisioningRequest,omitempty"`
}

func (o *options) whyPod(ctx context.Context, name, output string) error {
	namespace, _, err := o.config.ToRawKubeConfigLoader().Namespace()
	if err != nil {
		return fmt.Errorf("reading the namespace: %w", err)
	}
	answer := PodAnswer{Namespace: namespace, Name: name, Exists: true}
	// The pod as it is now; a caller who may not read pods gets the
	// record alone.
	checked := false
	if kube, err := o.kubeClient(); err == nil {
		var pod corev1.Pod
		switch err := kube.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, &pod); {
		case err == nil:
			checked, answer.NodeName = true, pod.Spec.NodeName
			if request := pod.Annotations[autoscalingv1.AnnotationConsumeProvisioningRequest]; request != "" {
				answer.ProvisioningRequest = namespace + "/" + request
			}
		case apierrors.IsNotFound(err):
			checked, answer.Exists = true, false
		}
	}
	endpoint, err := o.endpointClient(ctx)
	if err != nil {
		return err
	}
	defer endpoint.Close()
	var record decisions.PodRecord
	switch err := endpoint.get(ctx, "pods/"+namespace+"/"+name, &record); {
	case err == nil:
		answer.Record = &record
	case !errors.Is(err, errNotFound):
		return err
	}
	if output != "" {
		if !answer.Exists && answer.Record == nil {
			return fmt.Errorf("pod %s/%s not found", namespace, name)
		}
		return printStructured(o.streams.Out, output, answer)
	}
	return writePodAnswer(o.streams.Out, answer, checked, time.Now())
}

func writePodAnswer(w io.Writer, a PodAnswer, checked bool, now time.Time) error {
	if a.ProvisioningRequest == "" {
		return writePodDecision(w, a, checked, now)
	}
	// The pod's room is the request's: bought or found for the request,
	// booked until its pods arrive.
	if a.Record == nil && a.Exists {
		where := "it waits for a node"
		if a.NodeName != "" {
			where = "it runs on node " + a.NodeName
		}
		fmt.Fprintf(w, "pod %s/%s: %s, for ProvisioningRequest %s: claimscale provisions the request's capacity, not the pod's (why provisioningrequest says how it stands)\n",
			a.Namespace, a.Name, where, a.ProvisioningRequest)
		return nil
	}
	if err := writePodDecision(w, a, checked, now); err != nil {
		return err
	}
	fmt.Fprintf(w, "  for ProvisioningRequest %s (why provisioningrequest says how it stands)\n", a.ProvisioningRequest)
	return nil
}

func writePodDecision(w io.Writer, a PodAnswer, checked bool, now time.Time) error {
	switch {
	case !a.Exists && a.Record == nil:
		return fmt.Errorf("pod %s/%s not found", a.Namespace, a.Name)
	case a.Record == nil && a.NodeName != "":
		fmt.Fprintf(w, "pod %s/%s runs on node %s: claimscale made no decision about it, it never waited for a new node since the controller started\n", a.Namespace, a.Name, a.NodeName)
		return nil
	case a.Record == nil:
		what := "it was never pending for want of a node since the controller started"
		if !checked {
			what += ", or it does not exist"
		}
		return fmt.Errorf("claimscale has recorded no decision about pod %s/%s: %s (the scheduler marks a pod Unschedulable first; the controller decides within seconds of that)", a.Namespace, a.Name, what)
	}
	if !a.Exists {
		fmt.Fprintf(w, "pod %s/%s is gone; the last decision about it:\n", a.Namespace, a.Name)
	}
	writePod(w, *a.Record, now)
	if a.NodeName != "" {
		fmt.Fprintf(w, "  since then, the pod was scheduled on node %s\n", a.NodeName)
	}
	return nil
}

// writePod prints a pod's decision: the short form, exactly as on the
// pod's event, then each pool's refusal with its numbers.
func writePod(w io.Writer, r decisions.PodRecord, now time.Time) {
	dry := ""
	if r.DryRun {
		dry = " (dry-run)"
	}
	fmt.Fprintf(w, "pod %s/%s: %s%s, decided %s ago\n", r.Namespace, r.Name, r.Outcome, dry, duration.HumanDuration(now.Sub(r.Time)))
	if r.Outcome == decisions.PodNewNode {
		fmt.Fprintf(w, "  a new node of pool %s, shape %s", r.Pool, r.Shape)
		if r.Zone != "" {
			fmt.Fprintf(w, ", zone %s", r.Zone)
		}
		if r.NodeClaim != "" {
			fmt.Fprintf(w, ": claim %s", r.NodeClaim)
		}
		fmt.Fprintln(w)
		return
	}
	if r.Outcome == decisions.PodWoken {
		fmt.Fprintf(w, "  %s (pool %s, shape %s", decisions.WokenReason(r.NodeClaim), r.Pool, r.Shape)
		if r.Zone != "" {
			fmt.Fprintf(w, ", zone %s", r.Zone)
		}
		fmt.Fprintln(w, "), instead of a new node")
		return
	}
	fmt.Fprintf(w, "  no pool can hold the pod: %s\n", r.Reason)
	for _, p := range r.Pools {
		fmt.Fprintf(w, "  pool %s: %s", p.Pool, p.Kind)
		if p.Plugin != "" {
			fmt.Fprintf(w, " (plugin %s)", p.Plugin)
		}
		fmt.Fprintf(w, ": %s\n", p.Message)
		if len(p.Requested) > 0 {
			fmt.Fprintf(w, "    largest shape %s:\n", p.Shape)
			writeComparison(w, "requested", p.Requested, "allocatable", p.Available)
		}
		if len(p.Limits) > 0 {
			fmt.Fprintf(w, "    limits:\n")
			writeComparison(w, "limit", p.Limits, "in use", p.InUse)
		}
	}
}

// writeComparison lines up two resource lists, one resource a line
// ("nodes" is the node count of a node limit).
func writeComparison(w io.Writer, leftName string, left corev1.ResourceList, rightName string, right corev1.ResourceList) {
	names := make([]string, 0, len(left))
	for name := range left {
		names = append(names, string(name))
	}
	sort.Strings(names)
	for _, name := range names {
		l := left[corev1.ResourceName(name)]
		r, ok := right[corev1.ResourceName(name)]
		rs := "-"
		if ok {
			rs = r.String()
		}
		fmt.Fprintf(w, "      %-18s %s %s, %s %s\n", name+":", leftName, l.String(), rightName, rs)
	}
}

// PendingPod is a row of why pods: a pending pod and its latest decision.
type PendingPod struct {
	Namespace string               `json:"namespace"`
	Name      string               `json:"name"`
	Age       string               `json:"age"`
	Record    *decisions.PodRecord `json:"record,omitempty"`
	// Waiting says why there is no record, when there is none.
	Waiting string `json:"waiting,omitempty"`
}

// whyPendingPods lists the pending pods of the namespace (or of every
// one) with their latest decision.
func (o *options) whyPendingPods(ctx context.Context, all bool, output string) error {
	kube, err := o.kubeClient()
	if err != nil {
		return err
	}
	var list corev1.PodList
	var opts []client.ListOption
	namespace := ""
	if !all {
		if namespace, _, err = o.config.ToRawKubeConfigLoader().Namespace(); err != nil {
			return fmt.Errorf("reading the namespace: %w", err)
		}
		opts = append(opts, client.InNamespace(namespace))
	}
	if err := kube.List(ctx, &list, opts...); err != nil {
		return fmt.Errorf("listing pods: %w", err)
	}
	endpoint, err := o.endpointClient(ctx)
	if err != nil {
		return err
	}
	defer endpoint.Close()
	var records []decisions.PodRecord
	if err := endpoint.get(ctx, "pods", &records); err != nil {
		return err
	}
	byPod := map[string]*decisions.PodRecord{}
	for i := range records {
		byPod[records[i].Namespace+"/"+records[i].Name] = &records[i]
	}
	now := time.Now()
	rows := []PendingPod{}
	for i := range list.Items {
		pod := &list.Items[i]
		if pod.Spec.NodeName != "" || scheduling.Terminated(pod) || !pod.DeletionTimestamp.IsZero() {
			continue
		}
		row := PendingPod{Namespace: pod.Namespace, Name: pod.Name, Age: duration.HumanDuration(now.Sub(pod.CreationTimestamp.Time)), Record: byPod[pod.Namespace+"/"+pod.Name]}
		if row.Record == nil {
			row.Waiting = pendingWithoutRecord(pod)
		}
		rows = append(rows, row)
	}
	sort.Slice(rows, func(i, j int) bool {
		if rows[i].Namespace != rows[j].Namespace {
			return rows[i].Namespace < rows[j].Namespace
		}
		return rows[i].Name < rows[j].Name
	})
	if output != "" {
		return printStructured(o.streams.Out, output, rows)
	}
	if len(rows) == 0 {
		if all {
			fmt.Fprintln(o.streams.Out, "No pending pods found.")
		} else {
			fmt.Fprintf(o.streams.Out, "No pending pods found in namespace %s.\n", namespace)
		}
		return nil
	}
	table := tabwriter.NewWriter(o.streams.Out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(table, "NAMESPACE\tPOD\tAGE\tDECIDED\tOUTCOME\tREASON")
	for _, row := range rows {
		decided, outcome, reason := "-", "-", row.Waiting
		if r := row.Record; r != nil {
			decided, outcome = duration.HumanDuration(now.Sub(r.Time))+" ago", r.Outcome
			if r.DryRun {
				outcome += " (dry-run)"
			}
			reason = r.Reason
			if r.Outcome == decisions.PodNewNode {
				reason = fmt.Sprintf("a new node of pool %s, shape %s", r.Pool, r.Shape)
				if r.NodeClaim != "" {
					reason += ": claim " + r.NodeClaim
				}
			}
			if r.Outcome == decisions.PodWoken {
				reason = decisions.WokenReason(r.NodeClaim)
			}
		}
		fmt.Fprintf(table, "%s\t%s\t%s\t%s\t%s\t%s\n", row.Namespace, row.Name, row.Age, decided, outcome, reason)
	}
	return table.Flush()
}

// pendingWithoutRecord says why a pending pod has no decision.
func pendingWithoutRecord(pod *corev1.Pod) string {
	switch {
	case len(pod.Spec.SchedulingGates) > 0:
		return "scheduling gated: the scheduler does not look at it yet"
	case scheduling.BelongsToNode(pod):
		return "a DaemonSet's or static pod: it follows its node, no node is bought for it"
	case pod.Status.NominatedNodeName != "":
		return "nominated for node " + pod.Status.NominatedNodeName + " (preemption)"
	case clusterstate.Provisionable(pod):
		return "unschedulable, not decided on yet (the controller batches pending pods for a second or more)"
	}
	return "not marked unschedulable by the scheduler yet"
}

// NodeAnswer is why node's answer, as -o json|yaml print it: what a
// disruption round would decide now, and the latest record.
type NodeAnswer struct {
	// Now is the verdict of a round taken now, when the caller may read
	// what it needs; its outcome NotCandidate or Candidate means the round
	// would not consider or not decide on the node.
	Now *ScaleDownNodeVerdict `json:"now,omitempty"`
	// Record is the controller's latest record of the node, if any;
	// Current says whether the latest round repeated it.
	Record  *decisions.NodeRecord `json:"record,omitempty"`
	Current bool                  `json:"current"`
}

func (o *options) whyNode(ctx context.Context, kind, name, output string) error {
	endpoint, err := o.endpointClient(ctx)
	if err != nil {
		return err
	}
	defer endpoint.Close()
	var answer NodeAnswer
	var record decisions.NodeRecord
	switch err := endpoint.get(ctx, "nodes/"+name, &record); {
	case err == nil:
		answer.Record, answer.Current = &record, record.Current()
	case !errors.Is(err, errNotFound):
		return err
	}
	// What a round would decide now: the record may be from a round that
	// no longer looks at the node.
	now, planErr := o.nodeVerdictNow(ctx, endpoint, name)
	answer.Now = now
	if answer.Record != nil && now != nil && (now.Outcome != record.Outcome || now.Reason != record.Reason) {
		answer.Current = false
	}
	if output != "" {
		if answer.Record == nil && answer.Now == nil {
			return fmt.Errorf("%s %s not found among claimscale's nodes and claims", kind, name)
		}
		return printStructured(o.streams.Out, output, answer)
	}
	if err := writeNodeAnswer(o.streams.Out, kind, name, answer, planErr, time.Now()); err != nil {
		return err
	}
	if request := o.requestOfClaim(ctx, name); request != "" {
		fmt.Fprintf(o.streams.Out, "  bought for ProvisioningRequest %s (why provisioningrequest says how it stands)\n", request)
	}
	return nil
}

// nodeVerdictNow decides as a disruption round would now and returns its
// verdict on the node or claim called name: nil when it is not
// claimscale's, or when the plan cannot be made (the error says why).
func (o *options) nodeVerdictNow(ctx context.Context, endpoint *endpointClient, name string) (*ScaleDownNodeVerdict, error) {
	kube, err := o.kubeClient()
	if err != nil {
		return nil, err
	}
	var offers []decisions.PoolOffer
	if err := endpoint.get(ctx, "pools", &offers); err != nil {
		return nil, err
	}
	plan, _, err := planScaleDown(ctx, kube, offers, clock.RealClock{})
	if err != nil {
		return nil, err
	}
	for _, v := range scaleDownReportOf(plan, nil).Nodes {
		if v.Node == name || v.NodeClaim == name {
			return &v, nil
		}
	}
	return nil, nil
}

func writeNodeAnswer(w io.Writer, kind, name string, a NodeAnswer, planErr error, now time.Time) error {
	rounds := func(v *ScaleDownNodeVerdict) bool {
		// Kept or going: a verdict the controller's rounds record too.
		return v.Outcome == decisions.NodeKept || v.Outcome == decisions.NodeDisrupting
	}
	switch {
	case a.Record != nil && a.Current:
		writeNode(w, *a.Record, now)
		return nil
	case a.Record != nil && a.Record.Current() && a.Now != nil && rounds(a.Now):
		// The latest round's record, and a round taken now that decides
		// otherwise (time has passed, or what the controller remembers of
		// the node differs from what its objects say): both.
		writeNode(w, *a.Record, now)
		fmt.Fprintf(w, "  a round taken now would decide otherwise: %s: %s\n", verdictWords(*a.Now), a.Now.Message)
		return nil
	case a.Now != nil:
		node := a.Now.Node
		if node == "" {
			node = "-"
		}
		fmt.Fprintf(w, "node %s (claim %s, pool %s): %s now, as a disruption round would decide it\n", node, a.Now.NodeClaim, a.Now.Pool, verdictWords(*a.Now))
		fmt.Fprintf(w, "  %s\n", a.Now.Message)
		if r := a.Record; r != nil {
			fmt.Fprintf(w, "  the last record, from a round %s ago, no longer holds: %s, %s: %s\n", duration.HumanDuration(now.Sub(r.Time)), r.Outcome, r.Reason, r.Message)
		}
		return nil
	case a.Record != nil:
		writeNode(w, *a.Record, now)
		if !a.Current {
			fmt.Fprintf(w, "  later rounds (the latest %s ago) did not repeat this record: the node may no longer be a candidate; simulate --scale-down says what a round would do with it now\n",
				duration.HumanDuration(now.Sub(a.Record.LatestRound)))
		}
		return nil
	case planErr != nil:
		return fmt.Errorf("claimscale has recorded no disruption decision about %s %s, and what a round would decide now could not be worked out: %w", kind, name, planErr)
	}
	return fmt.Errorf("%s %s not found among claimscale's nodes and claims", kind, name)
}

// verdictWords says a verdict's outcome in words.
func verdictWords(v ScaleDownNodeVerdict) string {
	switch v.Outcome {
	case decisions.NodeDisrupting:
		return "would go, " + v.Reason
	case decisions.NodeKept:
		return "Kept, " + v.Reason
	case "Candidate":
		return "a candidate"
	}
	return "not a candidate"
}

func writeNode(w io.Writer, r decisions.NodeRecord, now time.Time) {
	dry := ""
	if r.DryRun {
		dry = " (dry-run)"
	}
	fmt.Fprintf(w, "node %s (claim %s, pool %s): %s, %s%s, decided %s ago\n", r.Node, r.NodeClaim, r.Pool, r.Outcome, r.Reason, dry, duration.HumanDuration(now.Sub(r.Time)))
	fmt.Fprintf(w, "  %s\n", r.Message)
}
