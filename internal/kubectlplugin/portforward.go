package kubectlplugin

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/transport/spdy"
)

// Where the chart and config/default run the controller, and the name of
// its metrics port.
const (
	defaultControllerNamespace = "claimscale-system"
	defaultControllerSelector  = "app.kubernetes.io/name=claimscale"
	metricsPortName            = "metrics"
	defaultMetricsPort         = 8443
)

// findController picks the controller pod to ask, of those in namespace
// with the selector's labels.
func findController(ctx context.Context, kube kubernetes.Interface, namespace, selector string) (*corev1.Pod, error) {
	pods, err := kube.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		return nil, fmt.Errorf("looking for the controller's pods in namespace %s: %w", namespace, err)
	}
	var leases []coordinationv1.Lease
	if list, err := kube.CoordinationV1().Leases(namespace).List(ctx, metav1.ListOptions{}); err == nil {
		// A caller who may not read leases gets the first ready pod.
		leases = list.Items
	}
	pod := chooseController(pods.Items, leases)
	if pod == nil {
		return nil, fmt.Errorf("no ready controller pod with labels %s in namespace %s (of %d found); say where it runs with --controller-namespace and --controller-selector, or give --endpoint",
			selector, namespace, len(pods.Items))
	}
	return pod, nil
}

// chooseController picks a ready pod: the holder of a leader lease (only
// the leader decides, so only it has records; leader election names the
// holder "<pod>_<uuid>"), else the first by name; nil if none is ready.
func chooseController(pods []corev1.Pod, leases []coordinationv1.Lease) *corev1.Pod {
	var ready []*corev1.Pod
	for i := range pods {
		if pod := &pods[i]; podReady(pod) {
			ready = append(ready, pod)
		}
	}
	if len(ready) == 0 {
		return nil
	}
	sort.Slice(ready, func(i, j int) bool { return ready[i].Name < ready[j].Name })
	for _, pod := range ready {
		if holdsLease(leases, pod.Name) {
			return pod
		}
	}
	return ready[0]
}

func holdsLease(leases []coordinationv1.Lease, pod string) bool {
	for _, lease := range leases {
		if holder := lease.Spec.HolderIdentity; holder != nil && (*holder == pod || strings.HasPrefix(*holder, pod+"_")) {
			return true
		}
	}
	return false
}

func podReady(pod *corev1.Pod) bool {
	if pod.Status.Phase != corev1.PodRunning || !pod.DeletionTimestamp.IsZero() {
		return false
	}
	for _, condition := range pod.Status.Conditions {
		if condition.Type == corev1.PodReady {
			return condition.Status == corev1.ConditionTrue
		}
	}
	return false
}

// metricsPort is the pod's port named metrics, else the default.
func metricsPort(pod *corev1.Pod) int32 {
	for _, container := range pod.Spec.Containers {
		for _, port := range container.Ports {
			if port.Name == metricsPortName {
				return port.ContainerPort
			}
		}
	}
	return defaultMetricsPort
}

// forwardPort opens a port-forward to the pod's port through the API
// server, as `kubectl port-forward` does, on a free port of 127.0.0.1, and
// returns that port and how to close the forward.
func forwardPort(ctx context.Context, config *rest.Config, pod *corev1.Pod, port int32, errOut io.Writer) (uint16, func(), error) {
	what := fmt.Sprintf("port-forwarding to port %d of controller pod %s/%s", port, pod.Namespace, pod.Name)
	kube, err := kubernetes.NewForConfig(config)
	if err != nil {
		return 0, nil, fmt.Errorf("%s: %w", what, err)
	}
	transport, upgrader, err := spdy.RoundTripperFor(config)
	if err != nil {
		return 0, nil, fmt.Errorf("%s: %w", what, err)
	}
	url := kube.CoreV1().RESTClient().Post().Resource("pods").Namespace(pod.Namespace).Name(pod.Name).SubResource("portforward").URL()
	dialer := spdy.NewDialer(upgrader, &http.Client{Transport: transport}, http.MethodPost, url)
	stop, ready := make(chan struct{}), make(chan struct{})
	forwarder, err := portforward.NewOnAddresses(dialer, []string{"127.0.0.1"}, []string{fmt.Sprintf("0:%d", port)}, stop, ready, io.Discard, errOut)
	if err != nil {
		return 0, nil, fmt.Errorf("%s: %w", what, err)
	}
	failed := make(chan error, 1)
	go func() { failed <- forwarder.ForwardPorts() }()
	select {
	case <-ready:
	case err := <-failed:
		if err == nil {
			err = fmt.Errorf("the forward closed")
		}
		return 0, nil, fmt.Errorf("%s: %w", what, err)
	case <-ctx.Done():
		close(stop)
		return 0, nil, fmt.Errorf("%s: %w", what, ctx.Err())
	}
	ports, err := forwarder.GetPorts()
	if err != nil || len(ports) == 0 {
		close(stop)
		return 0, nil, fmt.Errorf("%s: no local port: %v", what, err)
	}
	return ports[0].Local, func() { close(stop) }, nil
}
