package kubectlplugin

import (
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/duration"

	"github.com/claimscale/claimscale/internal/decisions"
)

func newWhyCommand(o *options) *cobra.Command {
	return &cobra.Command{
		Use:   "why (pod/NAME | node/NAME | nodeclaim/NAME)",
		Short: "Say why claimscale placed or did not place a pod, or keeps or removes a node",
		Example: `  kubectl claimscale why pod/web-7d9f -n shop
  kubectl claimscale why node/general-x2k9q
  kubectl claimscale why node/general-x2k9q --endpoint https://127.0.0.1:8443 --insecure-skip-endpoint-verify`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			kind, name, ok := strings.Cut(args[0], "/")
			if !ok || name == "" {
				return fmt.Errorf("%q is not KIND/NAME (pod/NAME, node/NAME or nodeclaim/NAME)", args[0])
			}
			client, err := o.endpointClient(cmd.Context())
			if err != nil {
				return err
			}
			defer client.Close()
			now := time.Now()
			switch strings.ToLower(kind) {
			case "pod", "pods", "po":
				namespace, _, err := o.config.ToRawKubeConfigLoader().Namespace()
				if err != nil {
					return fmt.Errorf("reading the namespace: %w", err)
				}
				var record decisions.PodRecord
				if err := client.get(cmd.Context(), "pods/"+namespace+"/"+name, &record); err != nil {
					if errors.Is(err, errNotFound) {
						return fmt.Errorf("claimscale has recorded no decision about pod %s/%s: it was never pending for want of a node since the controller started, or it was scheduled without one", namespace, name)
					}
					return err
				}
				writePod(o.streams.Out, record, now)
			case "node", "nodes", "no", "nodeclaim", "nodeclaims":
				var record decisions.NodeRecord
				if err := client.get(cmd.Context(), "nodes/"+name, &record); err != nil {
					if errors.Is(err, errNotFound) {
						return fmt.Errorf("claimscale has recorded no disruption decision about %s %s: it is no candidate (not initialized yet, or it runs pods and its pool consolidates only empty nodes), the controller has not run a round since it started, or it is not claimscale's; simulate --scale-down says what a round would do with it now", kind, name)
					}
					return err
				}
				writeNode(o.streams.Out, record, now)
			default:
				return fmt.Errorf("kind %q: want pod, node or nodeclaim", kind)
			}
			return nil
		},
	}
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
			writeComparison(w, "limit", p.Limits, "in use", p.InUse)
		}
	}
}

// writeComparison lines up two resource lists, one resource a line ("pods"
// is the node count of a node limit).
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

func writeNode(w io.Writer, r decisions.NodeRecord, now time.Time) {
	dry := ""
	if r.DryRun {
		dry = " (dry-run)"
	}
	fmt.Fprintf(w, "node %s (claim %s, pool %s): %s, %s%s, decided %s ago\n", r.Node, r.NodeClaim, r.Pool, r.Outcome, r.Reason, dry, duration.HumanDuration(now.Sub(r.Time)))
	fmt.Fprintf(w, "  %s\n", r.Message)
}
