package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	autoscalingv1 "github.com/claimscale/claimscale/api/autoscaling/v1"
	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/internal/testenv"
	"github.com/claimscale/claimscale/test/e2e/internal/harness"
)

// kueueVersion is the Kueue of hack/kueue/go.mod, whose manager
// hack/tools.sh builds into bin/kueue-manager.
const kueueVersion = "v0.17.0"

// A real Kueue admits a Job through a ClusterQueue whose AdmissionCheck
// is Kueue's ProvisioningRequest controller, with claimscale serving the
// requests: a Job of three pods that need a node each is admitted only
// once claimscale has bought all three nodes and they are Ready, and runs
// on them; a Job that cannot fit the pool's limit fails its check, and not
// one node is bought for it.
func TestKueueAdmitsAJobOnlyOnceClaimscaleProvisionedAllItsNodes(t *testing.T) {
	harness.StartOperator(t, harness.OperatorOptions{})
	startKueue(t)
	s := harness.NewScenario(t, "kueue")
	defer s.Cleanup()
	s.CreateProvider(v1alpha1.SimulatedSettings{})
	s.CreatePool(func(pool *v1alpha1.NodePool) { pool.Spec.Limits.Nodes = harness.Ptr(int32(4)) })
	createKueueQueues(t, s)

	s.G.Expect(env.Client.Create(s.Ctx, kueueJob(s, "train", 3, "3"))).To(Succeed())
	defer deleteJobs(s)
	s.G.Eventually(func() bool { return jobSuspended(s, "train") }).Should(BeFalse(), "Kueue admits the Job")
	request := requestOfJob(s, "train")
	provisioned := meta.FindStatusCondition(request.Status.Conditions, autoscalingv1.ConditionProvisioned)
	s.G.Expect(provisioned).NotTo(BeNil())
	s.G.Expect(provisioned.Status).To(Equal(metav1.ConditionTrue), "admitted only once provisioned")
	admitted := workloadCondition(s, "train", "Admitted")
	s.G.Expect(admitted.LastTransitionTime.Before(&provisioned.LastTransitionTime)).To(BeFalse(),
		"admitted at %s, provisioned at %s", admitted.LastTransitionTime, provisioned.LastTransitionTime)
	s.G.Expect(s.ReadyClaims()).To(Equal(3), "the three nodes were Ready before the Job was let go")
	nodes := map[string]bool{}
	for _, claim := range s.Claims() {
		nodes[claim.Status.NodeName] = true
	}
	s.G.Eventually(func(g Gomega) {
		var pods corev1.PodList
		g.Expect(env.Client.List(s.Ctx, &pods, client.InNamespace(s.Namespace), client.MatchingLabels{"batch.kubernetes.io/job-name": "train"})).To(Succeed())
		ran := 0
		for _, pod := range pods.Items {
			if pod.Spec.NodeName != "" && (pod.Status.Phase == corev1.PodRunning || pod.Status.Phase == corev1.PodSucceeded) {
				g.Expect(nodes).To(HaveKey(pod.Spec.NodeName), "pod %s runs on a node bought for the Job", pod.Name)
				g.Expect(pod.Annotations).To(HaveKeyWithValue(autoscalingv1.AnnotationConsumeProvisioningRequest, request.Name))
				ran++
			}
		}
		g.Expect(ran).To(Equal(3))
	}).Should(Succeed(), "the Job's pods run on its nodes")
	s.G.Expect(len(s.Claims())).To(Equal(3), "and no other node was bought for them")

	// Five pods of a node each, in a pool of four nodes at the most.
	s.G.Expect(env.Client.Create(s.Ctx, kueueJob(s, "huge", 5, "3"))).To(Succeed())
	s.G.Eventually(func() string {
		failed := meta.FindStatusCondition(requestOfJob(s, "huge").Status.Conditions, autoscalingv1.ConditionFailed)
		if failed == nil || failed.Status != metav1.ConditionTrue {
			return ""
		}
		return failed.Reason
	}).Should(Equal(autoscalingv1.ReasonCapacityIsNotFound), "claimscale fails the request: larger than the pool")
	// A check Rejected deactivates the Workload, which then shows the check
	// Pending again: the deactivation is what stays.
	s.G.Eventually(func() bool { return workloadDeactivated(s, "huge") }).Should(BeTrue(), "the Job fails its admission check")
	s.G.Expect(jobSuspended(s, "huge")).To(BeTrue(), "and never runs")
	s.G.Consistently(func() int { return len(s.Claims()) }, 2*time.Second, 250*time.Millisecond).Should(BeNumerically("<=", 3),
		"not one node was bought for it")
}

// startKueue runs the real Kueue manager (bin/kueue-manager, built by
// hack/tools.sh from hack/kueue/go.mod) against the test control plane
// until the test ends, with Kueue's CRDs from its module. What it takes to
// run it there, without a Service in front of it:
//   - internal cert management stays on: with it off, Kueue reads its
//     metrics certificate from a fixed path under /etc. Its rotator writes
//     the serving certificate into a Secret, which the test copies into the
//     webhook server's cert dir as the kubelet would mount it.
//   - its webhooks are served but not registered (no webhook
//     configurations): the Jobs are made suspended and labelled for their
//     queue, as Kueue's Job webhook would make them.
//   - the rotator waits until it has put its CA into the conversion
//     webhook of five of Kueue's CRDs: those get a conversion stanza, never
//     called, since everything is read and written at v1beta2, the storage
//     version.
//   - the visibility server (an aggregated API) is off.
func startKueue(t *testing.T) {
	t.Helper()
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	binary, err := testenv.Tool("kueue-manager")
	if err != nil {
		t.Fatal(err)
	}
	webhookPort := freeLoopbackPort(t)
	installKueueCRDs(t, root, webhookPort)
	ctx := context.Background()
	g := NewWithT(t)
	g.Expect(client.IgnoreAlreadyExists(env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "kueue-system"}}))).To(Succeed())
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "kueue-webhook-server-cert", Namespace: "kueue-system"}}
	g.Expect(client.IgnoreAlreadyExists(env.Client.Create(ctx, secret))).To(Succeed())

	certDir := t.TempDir()
	config := filepath.Join(t.TempDir(), "kueue.yaml")
	g.Expect(os.WriteFile(config, fmt.Appendf(nil, `apiVersion: config.kueue.x-k8s.io/v1beta2
kind: Configuration
namespace: kueue-system
health:
  healthProbeBindAddress: 127.0.0.1:%d
metrics:
  bindAddress: "0"
webhook:
  host: 127.0.0.1
  port: %d
  certDir: %s
leaderElection:
  leaderElect: false
internalCertManagement:
  enable: true
  webhookServiceName: kueue-webhook-service
  webhookSecretName: kueue-webhook-server-cert
integrations:
  frameworks: ["batch/job"]
featureGates:
  VisibilityOnDemand: false
`, freeLoopbackPort(t), webhookPort, certDir), 0o600)).To(Succeed())

	logs := &harness.LockedBuffer{}
	cmd := exec.Command(binary, "--config="+config, "--kubeconfig="+env.KubeconfigPath, "--zap-log-level=info")
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting the Kueue manager: %v", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
		if t.Failed() || os.Getenv("E2E_PROCESS_LOGS") != "" {
			t.Logf("Kueue manager output (last 16 KiB):\n%s", tail(logs.String(), 16384))
		}
	})
	// The kubelet's part: the certificate the rotator wrote, into the
	// webhook server's cert dir.
	g.Eventually(func(g Gomega) {
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(secret), secret)).To(Succeed())
		g.Expect(secret.Data).To(And(HaveKey("tls.crt"), HaveKey("tls.key")))
	}).WithTimeout(time.Minute).WithPolling(100*time.Millisecond).Should(Succeed(), "Kueue's rotator writes its certificate")
	for _, name := range []string{"tls.crt", "tls.key", "ca.crt"} {
		g.Expect(os.WriteFile(filepath.Join(certDir, name), secret.Data[name], 0o600)).To(Succeed())
	}
}

// installKueueCRDs installs Kueue's CRDs from its module, those with a
// conversion webhook pointing at the manager's webhook port.
func installKueueCRDs(t *testing.T, root string, webhookPort int) {
	t.Helper()
	cmd := exec.Command("go", "mod", "download", "-json", "sigs.k8s.io/kueue@"+kueueVersion)
	cmd.Dir = filepath.Join(root, "hack", "kueue")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("downloading sigs.k8s.io/kueue@%s: %v", kueueVersion, err)
	}
	var module struct{ Dir string }
	if err := json.Unmarshal(out, &module); err != nil || module.Dir == "" {
		t.Fatalf("finding sigs.k8s.io/kueue@%s in the module cache: %s", kueueVersion, out)
	}
	dir := filepath.Join(module.Dir, "config", "components", "crd", "bases")
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("reading Kueue's CRDs in %s: %v", dir, err)
	}
	converted := map[string]bool{"localqueues": true, "clusterqueues": true, "workloads": true, "cohorts": true, "multikueueclusters": true}
	var crds []*apiextensionsv1.CustomResourceDefinition
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := yaml.Unmarshal(data, crd); err != nil {
			t.Fatalf("reading %s: %v", file, err)
		}
		if converted[crd.Spec.Names.Plural] {
			url := "https://127.0.0.1:" + strconv.Itoa(webhookPort) + "/convert"
			crd.Spec.Conversion = &apiextensionsv1.CustomResourceConversion{
				Strategy: apiextensionsv1.WebhookConverter,
				Webhook: &apiextensionsv1.WebhookConversion{
					ConversionReviewVersions: []string{"v1"},
					ClientConfig:             &apiextensionsv1.WebhookClientConfig{URL: &url},
				},
			}
		}
		crds = append(crds, crd)
	}
	if _, err := envtest.InstallCRDs(env.Config, envtest.CRDInstallOptions{CRDs: crds}); err != nil {
		t.Fatalf("installing Kueue's CRDs: %v", err)
	}
}

// createKueueQueues makes a ClusterQueue with room for every Job of the
// test, whose admission check is Kueue's ProvisioningRequest controller
// asking claimscale for best-effort-atomic-scale-up and not retrying a
// failed request, and the scenario's LocalQueue in it. They are removed
// when the test ends.
func createKueueQueues(t *testing.T, s *harness.Scenario) {
	objects := []string{
		`apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: kueue-default}`,
		`apiVersion: kueue.x-k8s.io/v1beta2
kind: ProvisioningRequestConfig
metadata: {name: kueue-atomic}
spec:
  provisioningClassName: ` + autoscalingv1.ClassBestEffortAtomicScaleUp + `
  retryStrategy: {backoffLimitCount: 0}`,
		`apiVersion: kueue.x-k8s.io/v1beta2
kind: AdmissionCheck
metadata: {name: kueue-claimscale}
spec:
  controllerName: kueue.x-k8s.io/provisioning-request
  parameters: {apiGroup: kueue.x-k8s.io, kind: ProvisioningRequestConfig, name: kueue-atomic}`,
		`apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: kueue-batch}
spec:
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: [cpu, memory]
    flavors:
    - name: kueue-default
      resources:
      - {name: cpu, nominalQuota: "100"}
      - {name: memory, nominalQuota: 1000Gi}
  admissionChecksStrategy:
    admissionChecks:
    - name: kueue-claimscale`,
		`apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {name: batch, namespace: ` + s.Namespace + `}
spec: {clusterQueue: kueue-batch}`,
	}
	var created []*unstructured.Unstructured
	for _, text := range objects {
		object := &unstructured.Unstructured{}
		s.G.Expect(yaml.Unmarshal([]byte(text), &object.Object)).To(Succeed())
		s.G.Eventually(func() error { return env.Client.Create(s.Ctx, object) }).WithTimeout(30*time.Second).Should(Succeed(), "creating %s %s", object.GetKind(), object.GetName())
		created = append(created, object)
	}
	t.Cleanup(func() {
		for i := len(created) - 1; i >= 0; i-- {
			_ = env.Client.Delete(context.Background(), created[i])
		}
	})
}

// kueueJob is a Job of n pods requesting cpu each, for the scenario's
// LocalQueue, suspended as Kueue's webhook would make it.
func kueueJob(s *harness.Scenario, name string, n int32, cpu string) *batchv1.Job {
	spec := s.PodSpec(cpu)
	spec.RestartPolicy = corev1.RestartPolicyNever
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: s.Namespace, Labels: map[string]string{"kueue.x-k8s.io/queue-name": "batch"}},
		Spec: batchv1.JobSpec{
			Parallelism: harness.Ptr(n), Completions: harness.Ptr(n), Suspend: harness.Ptr(true),
			Template: corev1.PodTemplateSpec{Spec: spec},
		},
	}
}

func jobSuspended(s *harness.Scenario, name string) bool {
	var job batchv1.Job
	s.G.Expect(env.Client.Get(s.Ctx, client.ObjectKey{Namespace: s.Namespace, Name: name}, &job)).To(Succeed())
	return job.Spec.Suspend != nil && *job.Spec.Suspend
}

func deleteJobs(s *harness.Scenario) {
	s.G.Expect(env.Client.DeleteAllOf(s.Ctx, &batchv1.Job{}, client.InNamespace(s.Namespace), client.PropagationPolicy(metav1.DeletePropagationBackground))).To(Succeed())
}

// workload is the Kueue Workload of a Job.
func workload(s *harness.Scenario, job string) *unstructured.Unstructured {
	list := &unstructured.UnstructuredList{}
	list.SetAPIVersion("kueue.x-k8s.io/v1beta2")
	list.SetKind("WorkloadList")
	s.G.Expect(env.Client.List(s.Ctx, list, client.InNamespace(s.Namespace))).To(Succeed())
	for i := range list.Items {
		for _, owner := range list.Items[i].GetOwnerReferences() {
			if owner.Kind == "Job" && owner.Name == job {
				return &list.Items[i]
			}
		}
	}
	return nil
}

// workloadCondition is the condition of a Job's Workload, empty when it
// has none.
func workloadCondition(s *harness.Scenario, job, conditionType string) metav1.Condition {
	wl := workload(s, job)
	if wl == nil {
		return metav1.Condition{}
	}
	var status struct {
		Conditions []metav1.Condition `json:"conditions"`
	}
	raw, _ := json.Marshal(wl.Object["status"])
	_ = json.Unmarshal(raw, &status)
	if c := meta.FindStatusCondition(status.Conditions, conditionType); c != nil {
		return *c
	}
	return metav1.Condition{}
}

// workloadDeactivated says whether Kueue deactivated the Job's Workload
// (spec.active false), as it does when an admission check is Rejected.
func workloadDeactivated(s *harness.Scenario, job string) bool {
	wl := workload(s, job)
	if wl == nil {
		return false
	}
	active, found, _ := unstructured.NestedBool(wl.Object, "spec", "active")
	return found && !active
}

// requestOfJob is the ProvisioningRequest Kueue made for a Job's Workload
// (named after it), waiting until there is one.
func requestOfJob(s *harness.Scenario, job string) *autoscalingv1.ProvisioningRequest {
	var found *autoscalingv1.ProvisioningRequest
	s.G.Eventually(func() bool {
		wl := workload(s, job)
		if wl == nil {
			return false
		}
		var list autoscalingv1.ProvisioningRequestList
		s.G.Expect(env.Client.List(s.Ctx, &list, client.InNamespace(s.Namespace))).To(Succeed())
		for i := range list.Items {
			if strings.HasPrefix(list.Items[i].Name, wl.GetName()+"-") {
				found = &list.Items[i]
				return true
			}
		}
		return false
	}).Should(BeTrue(), "Kueue makes a ProvisioningRequest for Job %s", job)
	return found
}
