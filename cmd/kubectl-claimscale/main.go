// Command kubectl-claimscale is the kubectl plugin of claimscale: copy it
// onto the PATH and run `kubectl claimscale why pod/NAME`.
package main

import (
	"os"

	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/claimscale/claimscale/internal/kubectlplugin"
)

func main() {
	streams := genericiooptions.IOStreams{In: os.Stdin, Out: os.Stdout, ErrOut: os.Stderr}
	if err := kubectlplugin.NewCommand(streams).Execute(); err != nil {
		os.Exit(1)
	}
}
