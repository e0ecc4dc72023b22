package kubectlplugin

import (
	"encoding/json"
	"fmt"
	"io"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"

	"github.com/claimscale/claimscale/internal/controllers/disruption"
)

// addOutputFlag adds -o, as kubectl spells it: json or yaml print the
// command's answer as data instead of the table or the sentences.
func addOutputFlag(cmd *cobra.Command, output *string) {
	cmd.Flags().StringVarP(output, "output", "o", "", "output format: json or yaml (default: a table or sentences for people)")
}

func checkOutput(output string) error {
	switch output {
	case "", "json", "yaml":
		return nil
	}
	return fmt.Errorf("unknown output format %q: want json or yaml", output)
}

// printStructured writes v as JSON (indented) or YAML.
func printStructured(w io.Writer, output string, v any) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding the answer: %w", err)
	}
	if output == "yaml" {
		if data, err = yaml.JSONToYAML(data); err != nil {
			return fmt.Errorf("encoding the answer: %w", err)
		}
		_, err = w.Write(data)
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", data)
	return err
}

// ScaleDownReport is simulate --scale-down's answer, as -o json|yaml print it.
type ScaleDownReport struct {
	Settling string                 `json:"settling,omitempty"`
	InFlight []string               `json:"inFlight,omitempty"`
	Decision *ScaleDownDecision     `json:"decision,omitempty"`
	Nodes    []ScaleDownNodeVerdict `json:"nodes"`
	LeftOut  []string               `json:"leftOut,omitempty"`
}

// ScaleDownDecision is the round's one decision.
type ScaleDownDecision struct {
	Reason        string             `json:"reason"`
	Action        string             `json:"action"`
	Message       string             `json:"message"`
	Replacements  []ScaleDownNewNode `json:"replacements,omitempty"`
	PricePerHour  float64            `json:"pricePerHour"`
	SavingPerHour float64            `json:"savingPerHour"`
}

// ScaleDownNewNode is a replacement node.
type ScaleDownNewNode struct {
	Pool         string  `json:"pool"`
	Shape        string  `json:"shape"`
	Zone         string  `json:"zone,omitempty"`
	PricePerHour float64 `json:"pricePerHour"`
}

// ScaleDownNodeVerdict is what the round would do with one node.
type ScaleDownNodeVerdict struct {
	Node         string  `json:"node,omitempty"`
	NodeClaim    string  `json:"nodeClaim"`
	Pool         string  `json:"pool"`
	Outcome      string  `json:"outcome"`
	Reason       string  `json:"reason,omitempty"`
	Message      string  `json:"message"`
	PricePerHour float64 `json:"pricePerHour"`
}

func scaleDownReportOf(plan *disruption.Plan, leftOut []string) ScaleDownReport {
	report := ScaleDownReport{Settling: plan.Settling, InFlight: plan.InFlight, LeftOut: leftOut, Nodes: []ScaleDownNodeVerdict{}}
	if d := plan.Decision; d != nil {
		report.Decision = &ScaleDownDecision{Reason: string(d.Reason), Action: d.Action, Message: d.Message, PricePerHour: d.Price, SavingPerHour: d.Saving}
		for _, n := range d.Replacements {
			report.Decision.Replacements = append(report.Decision.Replacements, ScaleDownNewNode{Pool: n.Pool, Shape: n.Shape, Zone: n.Zone, PricePerHour: n.Price})
		}
	}
	for _, v := range plan.Nodes {
		report.Nodes = append(report.Nodes, ScaleDownNodeVerdict{Node: v.Node, NodeClaim: v.NodeClaim, Pool: v.Pool, Outcome: v.Outcome, Reason: v.Reason, Message: v.Message, PricePerHour: v.Price})
	}
	return report
}
