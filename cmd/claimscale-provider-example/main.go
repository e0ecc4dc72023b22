// Command claimscale-provider-example is the reference provider plugin: it
// serves the simulated provider over the claimscale.provider.v1 protocol,
// power included (see docs/provider-plugins.md).
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/claimscale/claimscale/internal/providerexample"
)

func main() {
	var (
		opts       providerexample.Options
		bootDelay  time.Duration
		startDelay time.Duration
		zones      string
	)
	flag.StringVar(&opts.Listen, "listen", "127.0.0.1:9443", "host:port (mutual TLS) or unix:///path (a sidecar's socket, no TLS)")
	flag.StringVar(&opts.CertFile, "tls-cert", "", "the plugin's server certificate (PEM), reloaded when it changes")
	flag.StringVar(&opts.KeyFile, "tls-key", "", "the server certificate's key (PEM)")
	flag.StringVar(&opts.ClientCAFile, "client-ca", "", "the CA (PEM) claimscale's client certificate must chain to")
	flag.StringVar(&opts.ClusterName, "cluster-name", "", "the cluster whose machines this plugin makes (required; claimscale's --cluster-name)")
	flag.StringVar(&opts.Namespace, "namespace", "claimscale-system", "namespace the simulated machines' records are kept in")
	flag.DurationVar(&bootDelay, "boot-delay", 2*time.Second, "time from Create to the machine's Node registering")
	flag.DurationVar(&startDelay, "start-delay", time.Second, "time from Resume of a sleeping machine to its Node registering again")
	flag.StringVar(&zones, "zones", "", "comma-separated zones the machines are spread over")
	flag.Parse()

	opts.Simulated.BootDelay = &metav1.Duration{Duration: bootDelay}
	opts.Simulated.StartDelay = &metav1.Duration{Duration: startDelay}
	if zones != "" {
		opts.Simulated.Zones = strings.Split(zones, ",")
	}
	config, err := ctrl.GetConfig()
	if err == nil {
		opts.RESTConfig = config
		err = providerexample.Run(ctrl.SetupSignalHandler(), opts)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "claimscale-provider-example:", err)
		os.Exit(1)
	}
}
