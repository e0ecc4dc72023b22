package cloudscale_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	testingclock "k8s.io/utils/clock/testing"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/pkg/provider"
	"github.com/claimscale/claimscale/pkg/provider/cloudscale"
	"github.com/claimscale/claimscale/pkg/provider/cloudscale/cloudscaletest"
)

const (
	testToken   = "tok-9f2c7e1a5b3d4c6e8a0b2d4f6a8c0e1f"
	testCluster = "prod"
	userData    = "#cloud-config\nruncmd:\n  - echo hello\n"
)

// secretStore is an in-memory provider.SecretReader.
type secretStore map[string][]byte

func (s secretStore) ReadSecretKey(_ context.Context, ref v1alpha1.SecretKeyReference) ([]byte, error) {
	v, ok := s[ref.Namespace+"/"+ref.Name+"/"+ref.Key]
	if !ok {
		return nil, fmt.Errorf("secret %s/%s has no key %s", ref.Namespace, ref.Name, ref.Key)
	}
	return v, nil
}

// logSink keeps every log line, to check what was logged.
type logSink struct {
	mu    sync.Mutex
	lines []string
}

func (l *logSink) add(prefix, args string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, prefix+" "+args)
}

func (l *logSink) all() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}

// env is a provider wired to a fake API and a fake clock.
type env struct {
	api   *cloudscaletest.Server
	p     *cloudscale.Provider
	clock *testingclock.FakeClock
	logs  *logSink
	ctx   context.Context
}

type envOption func(*envConfig)

type envConfig struct {
	settings    v1alpha1.CloudscaleSettings
	credentials map[string][]byte
	apiOptions  []cloudscaletest.Option
	config      cloudscale.Config
	groups      []cloudscaletest.ServerGroupSpec
}

// withServerGroups puts server groups (the ones the settings name) into the
// fake before the provider is built.
func withServerGroups(groups ...cloudscaletest.ServerGroupSpec) envOption {
	return func(c *envConfig) { c.groups = append(c.groups, groups...) }
}

func withSettings(mutate func(*v1alpha1.CloudscaleSettings)) envOption {
	return func(c *envConfig) { mutate(&c.settings) }
}

func withAPIOptions(opts ...cloudscaletest.Option) envOption {
	return func(c *envConfig) { c.apiOptions = append(c.apiOptions, opts...) }
}

func withCredentials(creds map[string][]byte) envOption {
	return func(c *envConfig) { c.credentials = creds }
}

func withConfig(mutate func(*cloudscale.Config)) envOption {
	return func(c *envConfig) { mutate(&c.config) }
}

func baseSettings() v1alpha1.CloudscaleSettings {
	return v1alpha1.CloudscaleSettings{
		Zone:         "lpg1",
		Image:        "debian-12",
		VolumeSizeGB: 50,
		UserDataSecretRef: &v1alpha1.SecretKeyReference{
			SecretReference: v1alpha1.SecretReference{Namespace: "claimscale-system", Name: "worker-user-data"},
			Key:             "user-data",
		},
		Tags: map[string]string{"team": "platform"},
	}
}

func nodeProvider(s v1alpha1.CloudscaleSettings) *v1alpha1.NodeProvider {
	return &v1alpha1.NodeProvider{
		ObjectMeta: metav1.ObjectMeta{Name: "cloudscale"},
		Spec: v1alpha1.NodeProviderSpec{
			Type:                 v1alpha1.ProviderTypeCloudscale,
			CredentialsSecretRef: &v1alpha1.SecretReference{Namespace: "claimscale-system", Name: "cloudscale"},
			Cloudscale:           &s,
		},
	}
}

func newEnv(t *testing.T, opts ...envOption) *env {
	t.Helper()
	cfg := envConfig{settings: baseSettings()}
	for _, opt := range opts {
		opt(&cfg)
	}
	api := cloudscaletest.NewServer(append([]cloudscaletest.Option{cloudscaletest.WithToken(testToken)}, cfg.apiOptions...)...)
	t.Cleanup(api.Close)
	for _, group := range cfg.groups {
		api.AddServerGroup(group)
	}
	if cfg.credentials == nil {
		cfg.credentials = map[string][]byte{
			cloudscale.CredentialToken:  []byte(testToken + "\n"),
			cloudscale.CredentialAPIURL: []byte(api.URL),
		}
	}
	clk := testingclock.NewFakeClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	cfg.config.Clock = clk
	logs := &logSink{}
	// A deadline in real time: an operation that unexpectedly waits on the
	// fake clock fails the test instead of hanging it.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	ctx = logf.IntoContext(ctx, funcr.New(logs.add, funcr.Options{Verbosity: 10}))
	p, err := cloudscale.NewWithConfig(ctx, nodeProvider(cfg.settings), provider.Options{
		ClusterName: testCluster,
		Credentials: cfg.credentials,
		Secrets: secretStore{
			"claimscale-system/worker-user-data/user-data": []byte(userData),
		},
	}, cfg.config)
	if err != nil {
		t.Fatalf("building provider: %v", err)
	}
	return &env{api: api, p: p, clock: clk, logs: logs, ctx: ctx}
}

// stepping runs fn and, while it runs, steps the fake clock whenever
// something waits on it, so retry waits pass at once. It fails the test if
// fn does not return within 10 s of real time.
func (e *env) stepping(t *testing.T, step time.Duration, fn func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn()
	}()
	poll := time.NewTicker(time.Millisecond)
	defer poll.Stop()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case <-done:
			return
		case <-deadline:
			t.Fatal("operation did not finish within 10s")
		case <-poll.C:
			if e.clock.HasWaiters() {
				e.clock.Step(step)
			}
		}
	}
}

func claim(name, pool, shape string) *v1alpha1.NodeClaim {
	return &v1alpha1.NodeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1alpha1.NodeClaimSpec{
			NodePoolRef: v1alpha1.NodePoolReference{Name: pool},
			Shape: v1alpha1.ClaimShape{
				Name:   shape,
				CPU:    resource.MustParse("4"),
				Memory: resource.MustParse("8Gi"),
			},
		},
	}
}

func pool(name string, shapes ...v1alpha1.Shape) *v1alpha1.NodePool {
	return &v1alpha1.NodePool{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1alpha1.NodePoolSpec{
			ProviderRef: v1alpha1.ProviderReference{Name: "cloudscale"},
			Shapes:      v1alpha1.Shapes{Fixed: shapes},
		},
	}
}

func ourTags(pool, claim string) map[string]string {
	return map[string]string{
		v1alpha1.TagCluster:   testCluster,
		v1alpha1.TagNodePool:  pool,
		v1alpha1.TagNodeClaim: claim,
	}
}
