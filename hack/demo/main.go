// Command demo runs claimscale's demo on a local control plane: a real
// kube-apiserver, etcd, kube-controller-manager, kube-scheduler and kwok,
// the claimscale controller with the simulated provider, and a Deployment
// that needs more than the cluster has. It shows pods pending, nodes
// appearing, pods Running, and the nodes going again after the Deployment
// is scaled to zero. Run it with `make demo`; `make up` and `make down`
// keep the same cluster running for trying things by hand (updown.go).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/claimscale/claimscale/api/v1alpha1"
)

const (
	replicas = 20
	// The whole demo gives up after this long, so it never hangs.
	deadline = 5 * time.Minute
)

func main() {
	up := flag.String("up", "", "start the local cluster in the background and keep it running; its state (kubeconfig, process ids, logs) goes into this directory")
	down := flag.String("down", "", "stop the local cluster whose state is in this directory")
	serve := flag.String("serve", "", "(internal) run the local cluster in the foreground until SIGTERM, state in this directory")
	flag.StringVar(&controllerBinary, "controller", "", "the claimscale binary to run (default bin/claimscale)")
	flag.Parse()
	var err error
	switch {
	case *up != "":
		err = startInBackground(*up)
	case *down != "":
		err = stopBackground(*down)
	case *serve != "":
		err = serveLocalCluster(*serve)
	default:
		err = run()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

func run() error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, deadline)
	defer cancel()

	local, err := startLocalCluster(ctx, os.TempDir())
	if local != nil {
		defer local.Stop()
	}
	if err != nil {
		return err
	}
	kube, kubectl := local.env.Client, local.kubectl(ctx)

	step(fmt.Sprintf("creating a Deployment of %d pods × 1 cpu; the cluster has no nodes", replicas))
	deployment := demoDeployment()
	if err := kube.Create(ctx, deployment); err != nil {
		return err
	}
	if err := waitFor(ctx, "every pod Running", func() (bool, string) {
		status := clusterStatus(ctx, kube)
		return status.running == replicas, status.String()
	}); err != nil {
		return err
	}
	if err := kubectl("get", "nodeclaims", "-o", "wide"); err != nil {
		return err
	}
	if err := describeFirstClaim(ctx, kube, kubectl); err != nil {
		return err
	}
	if err := kubectl("get", "nodes", "-L", "node.kubernetes.io/instance-type,topology.kubernetes.io/zone"); err != nil {
		return err
	}
	if err := kubectl("get", "nodepools"); err != nil {
		return err
	}

	step("each node joined with a bootstrap token of its own: a CSR as system:bootstrap:<id>, approved and signed; the tokens are gone once the nodes registered")
	if err := kubectl("get", "nodeclaims", "-o",
		"custom-columns=CLAIM:.metadata.name,TOKEN-ID:.status.bootstrapToken.id,EXPIRES:.status.bootstrapToken.expiresAt,REVOKED:.status.bootstrapToken.revokedAt"); err != nil {
		return err
	}
	if err := kubectl("get", "csr", "-o",
		"custom-columns=NAME:.metadata.name,REQUESTOR:.spec.username,SIGNER:.spec.signerName,CONDITION:.status.conditions[*].type"); err != nil {
		return err
	}
	if err := kubectl("get", "secrets", "-n", "kube-system", "-l", "claimscale.io/bootstrap-token"); err != nil {
		return err
	}

	step("scaling the Deployment to zero; empty nodes go after the pool's consolidateAfter (10s)")
	scaleDown := client.MergeFrom(deployment.DeepCopy())
	deployment.Spec.Replicas = ptr(int32(0))
	if err := kube.Patch(ctx, deployment, scaleDown); err != nil {
		return err
	}
	if err := waitFor(ctx, "every node removed", func() (bool, string) {
		status := clusterStatus(ctx, kube)
		return status.nodes == 0 && status.claims == 0, status.String()
	}); err != nil {
		return err
	}
	if err := kubectl("get", "nodeclaims,nodes"); err != nil {
		return err
	}
	step("done: pods pending → nodes appeared → pods Running → nodes removed")
	return nil
}

// describeFirstClaim shows one claim's conditions and events, which is
// where a person looks when a node does not come.
func describeFirstClaim(ctx context.Context, kube client.Client, kubectl func(...string) error) error {
	var claims v1alpha1.NodeClaimList
	if err := kube.List(ctx, &claims); err != nil || len(claims.Items) == 0 {
		return err
	}
	return kubectl("describe", "nodeclaim", claims.Items[0].Name)
}

func demoDeployment() *appsv1.Deployment {
	labels := map[string]string{"app": "demo"}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "demo", Namespace: "default"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr(int32(replicas)),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{
					Name: "app", Image: "registry.example/demo:1",
					Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
						corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("512Mi"),
					}},
				}}},
			},
		},
	}
}

type status struct {
	pending, running, claims, readyClaims, nodes int
}

func (s status) String() string {
	return fmt.Sprintf("pods: %2d pending %2d running | claims: %d (%d ready) | nodes: %d",
		s.pending, s.running, s.claims, s.readyClaims, s.nodes)
}

func clusterStatus(ctx context.Context, kube client.Client) status {
	var s status
	var pods corev1.PodList
	if kube.List(ctx, &pods, client.InNamespace("default")) == nil {
		for _, pod := range pods.Items {
			switch {
			case pod.Status.Phase == corev1.PodRunning:
				s.running++
			case pod.Status.Phase == corev1.PodPending:
				s.pending++
			}
		}
	}
	var claims v1alpha1.NodeClaimList
	if kube.List(ctx, &claims) == nil {
		s.claims = len(claims.Items)
		for _, claim := range claims.Items {
			if meta.IsStatusConditionTrue(claim.Status.Conditions, v1alpha1.ConditionReady) {
				s.readyClaims++
			}
		}
	}
	var nodes corev1.NodeList
	if kube.List(ctx, &nodes) == nil {
		s.nodes = len(nodes.Items)
	}
	return s
}

// waitFor polls until done, printing the state each time it changes.
func waitFor(ctx context.Context, what string, check func() (bool, string)) error {
	fmt.Printf("waiting for %s\n", what)
	started := time.Now()
	last := ""
	ticker := time.NewTicker(500 * time.Millisecond)
	defer ticker.Stop()
	for {
		done, state := check()
		if state != "" && state != last {
			fmt.Printf("  %5.1fs  %s\n", time.Since(started).Seconds(), state)
			last = state
		}
		if done {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w", what, ctx.Err())
		case <-ticker.C:
		}
	}
}

func step(message string) { fmt.Printf("\n==> %s\n", message) }

func ptr[T any](v T) *T { return &v }
