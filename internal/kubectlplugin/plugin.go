// Package kubectlplugin is `kubectl claimscale`: it answers "why" from the
// controller's decision records, read through the controller's read-only
// decisions endpoint with the caller's own Kubernetes credentials.
package kubectlplugin

import (
	"fmt"
	"runtime"

	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/claimscale/claimscale/internal/version"
)

// options are the flags every subcommand shares.
type options struct {
	streams genericiooptions.IOStreams
	config  *genericclioptions.ConfigFlags
	// endpoint is the controller's metrics server (https://host:port);
	// the decisions are read from it.
	endpoint string
	// endpointCA verifies the endpoint's certificate; insecureEndpoint
	// skips the check (the controller's default certificate is
	// self-signed).
	endpointCA       string
	insecureEndpoint bool
	// Without an endpoint, the controller is found by these and reached
	// through a port-forward; controllerPort 0 is the pod's metrics port.
	controllerNamespace string
	controllerSelector  string
	controllerPort      int32
}

// NewCommand is the plugin's root command.
func NewCommand(streams genericiooptions.IOStreams) *cobra.Command {
	o := &options{streams: streams, config: genericclioptions.NewConfigFlags(true)}
	root := &cobra.Command{
		Use:           "kubectl-claimscale",
		Version:       version.Version,
		Short:         "Ask claimscale why it decided what it did",
		SilenceUsage:  true,
		SilenceErrors: false,
	}
	root.SetOut(streams.Out)
	root.SetErr(streams.ErrOut)
	flags := root.PersistentFlags()
	o.config.AddFlags(flags)
	flags.StringVar(&o.endpoint, "endpoint", "", "URL of the claimscale controller's metrics server (https://HOST:PORT), which serves the decision records; by default the plugin finds a ready controller pod and reaches it through a port-forward")
	flags.StringVar(&o.controllerNamespace, "controller-namespace", defaultControllerNamespace, "namespace the claimscale controller runs in")
	flags.StringVar(&o.controllerSelector, "controller-selector", defaultControllerSelector, "labels of the claimscale controller's pods")
	flags.Int32Var(&o.controllerPort, "controller-port", 0, "the controller pod's metrics port (default: its port named metrics, else 8443)")
	flags.StringVar(&o.endpointCA, "endpoint-ca", "", "CA file (PEM) that signed the endpoint's certificate")
	flags.BoolVar(&o.insecureEndpoint, "insecure-skip-endpoint-verify", false, "do not verify the endpoint's certificate (the controller's default one is self-signed)")
	root.AddCommand(newWhyCommand(o), newGetCommand(o), newSimulateCommand(o), newSnapshotCommand(o), newVersionCommand(o))
	return root
}

func newVersionCommand(o *options) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print the plugin's version",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			if err := checkOutput(output); err != nil {
				return err
			}
			if output != "" {
				return printStructured(o.streams.Out, output, map[string]string{
					"version": version.Version, "commit": version.Commit, "goVersion": runtime.Version(),
				})
			}
			_, err := fmt.Fprintf(o.streams.Out, "kubectl-claimscale %s (commit %s, %s)\n", version.Version, version.Commit, runtime.Version())
			return err
		},
	}
	addOutputFlag(cmd, &output)
	return cmd
}
