package proxmox_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/pkg/provider"
	"github.com/claimscale/claimscale/pkg/provider/proxmox"
	"github.com/claimscale/claimscale/pkg/provider/proxmox/proxmoxtest"
)

func TestCreateErrors(t *testing.T) {
	tests := []struct {
		name   string
		inject func(api *proxmoxtest.Server)
		// wantKind is "retryable" or "terminal"; wantText a substring.
		wantKind string
		wantText string
		// retrySucceeds says a second Create, without the fault, makes the VM.
		retrySucceeds bool
	}{
		{
			name:          "a 500 on the first call is retryable and the retry succeeds",
			inject:        func(api *proxmoxtest.Server) { api.InjectFault(proxmoxtest.Fault{Status: 500, Message: "got timeout"}) },
			wantKind:      "retryable",
			wantText:      "listing VMs: GET /cluster/resources: got timeout (500)",
			retrySucceeds: true,
		},
		{
			name: "a 503 without a message is retryable",
			inject: func(api *proxmoxtest.Server) {
				api.InjectFault(proxmoxtest.Fault{Method: http.MethodPost, Path: `/clone$`, Status: 503})
			},
			wantKind:      "retryable",
			wantText:      "Service Unavailable (503)",
			retrySucceeds: true,
		},
		{
			name: "a failed clone task's exit status is the error",
			inject: func(api *proxmoxtest.Server) {
				api.FailTask(proxmoxtest.TaskFault{Type: "qmclone", ExitStatus: "clone failed: storage 'local-lvm' has no space left", Polls: 3})
			},
			wantKind:      "retryable",
			wantText:      "cloning template 9000 to VM 1000 on pve1: clone failed: storage 'local-lvm' has no space left",
			retrySucceeds: true,
		},
		{
			name: "a failed start task's exit status is the error",
			inject: func(api *proxmoxtest.Server) {
				api.FailTask(proxmoxtest.TaskFault{Type: "qmstart", ExitStatus: "start failed: QEMU exited with code 1"})
			},
			wantKind:      "retryable",
			wantText:      "starting VM 1000 on pve1: start failed: QEMU exited with code 1",
			retrySucceeds: true,
		},
		{
			name: "a 403 names the privilege the token lacks",
			inject: func(api *proxmoxtest.Server) {
				api.InjectFault(proxmoxtest.Fault{Method: http.MethodPost, Path: `/clone$`, Status: 403, Message: "Permission check failed (/vms/1000, VM.Allocate)"})
			},
			wantKind: "terminal",
			wantText: "proxmox API token lacks VM.Allocate on /vms/1000 (403)",
		},
		{
			name: "a 401 is terminal",
			inject: func(api *proxmoxtest.Server) {
				api.InjectFault(proxmoxtest.Fault{Path: `/cluster/resources`, Status: 401, Message: "authentication failure"})
			},
			wantKind: "terminal",
			wantText: "the proxmox API rejected the token from the credentials Secret (authentication failure, 401)",
		},
		{
			name: "a parameter Proxmox refuses is terminal",
			inject: func(api *proxmoxtest.Server) {
				api.InjectFault(proxmoxtest.Fault{Method: http.MethodPost, Path: `/config$`, Status: 400, Message: "Parameter verification failed."})
			},
			wantKind: "terminal",
			wantText: "configuring VM 1000 on pve1: POST /nodes/pve1/qemu/1000/config: Parameter verification failed. (400)",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			api := fakeAPI(t)
			p := newProvider(t, api, cloneProvider(api.Endpoint()))
			tt.inject(api)
			ctx, _ := loggingContext(t)

			_, err := p.Create(ctx, claim("workers-a1", "2", "4Gi"), provider.CreateOptions{})
			if err == nil {
				t.Fatal("Create succeeded, want an error")
			}
			if got := kind(err); got != tt.wantKind {
				t.Errorf("error kind = %s, want %s (%v)", got, tt.wantKind, err)
			}
			if !strings.Contains(err.Error(), tt.wantText) {
				t.Errorf("error = %q, want it to contain %q", err, tt.wantText)
			}
			if !tt.retrySucceeds {
				return
			}
			inst, err := p.Create(ctx, claim("workers-a1", "2", "4Gi"), provider.CreateOptions{})
			if err != nil {
				t.Fatalf("retried Create: %v", err)
			}
			if vm, _ := api.VMByName("workers-a1"); inst.ProviderID != proxmox.ProviderID(clusterName, vm.VMID) || vm.Status != "running" {
				t.Errorf("retried Create returned %s; the VM is %d, %s", inst.ProviderID, vm.VMID, vm.Status)
			}
			if n := len(api.VMs()); n != 2 {
				t.Errorf("%d guests exist after the retry, want the template and one VM", n)
			}
		})
	}
}

func kind(err error) string {
	switch {
	case provider.IsTerminal(err):
		return "terminal"
	case provider.IsInsufficientCapacity(err):
		return "insufficient-capacity"
	case provider.IsNotFound(err):
		return "not-found"
	case provider.IsRetryable(err):
		return "retryable"
	}
	return "none"
}

func TestTaskDeadline(t *testing.T) {
	g := NewWithT(t)
	api := fakeAPI(t)
	api.FailTask(proxmoxtest.TaskFault{Type: "qmclone", Polls: 1 << 30})
	clk := clocktesting.NewFakeClock(time.Now())
	tuning := proxmox.Tuning{TaskPollInterval: time.Second, TaskTimeout: time.Minute, Clock: clk}
	p, err := proxmox.NewFactory(tuning)(context.Background(), cloneProvider(api.Endpoint()), provider.Options{ClusterName: clusterName, Credentials: tokenCredentials(api)})
	g.Expect(err).NotTo(HaveOccurred())
	ctx, _ := loggingContext(t)

	// create runs Create, stepping the fake clock by one poll interval after
	// each task poll the API sees, until Create returns. Stepping once per
	// poll (rather than whenever the clock has waiters: a ticker always
	// has one) delivers every tick, so the number of polls is exact.
	statusPolls := func() int { return len(api.RequestsTo(http.MethodGet, `/tasks/.*/status$`)) }
	create := func() (*provider.Instance, error) {
		stepped := statusPolls()
		type result struct {
			inst *provider.Instance
			err  error
		}
		done := make(chan result, 1)
		go func() {
			inst, err := p.Create(ctx, claim("workers-a1", "2", "4Gi"), provider.CreateOptions{})
			done <- result{inst, err}
		}()
		var r result
		g.Eventually(func() bool {
			select {
			case r = <-done:
				return true
			default:
			}
			if polls := statusPolls(); polls > stepped {
				stepped = polls
				clk.Step(time.Second)
			}
			return false
		}).WithTimeout(20 * time.Second).WithPolling(time.Millisecond).Should(BeTrue())
		return r.inst, r.err
	}

	_, err = create()
	g.Expect(provider.IsRetryable(err)).To(BeTrue(), "error %v", err)
	g.Expect(err.Error()).To(ContainSubstring("task qmclone on pve1 still running after 1m0s"))
	g.Expect(len(api.RequestsTo(http.MethodGet, `/tasks/.*/status$`))).To(BeNumerically(">=", 60), "the task was polled every second for a minute")

	// The clone runs on and shows no name yet: the retry waits for it
	// instead of cloning a second VM.
	_, err = create()
	g.Expect(provider.IsRetryable(err)).To(BeTrue(), "error %v", err)
	g.Expect(err.Error()).To(ContainSubstring("VM 1000 on pve1 is being made (lock clone)"))
	g.Expect(api.RequestsTo(http.MethodPost, `/clone$`)).To(HaveLen(1))

	// Once the clone is done, the next retry adopts it.
	api.FinishTasks()
	inst, err := create()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(inst.ProviderID).To(Equal("proxmox://test-cluster/1000"))
	g.Expect(api.RequestsTo(http.MethodPost, `/clone$`)).To(HaveLen(1))
	vm, _ := api.VM(1000)
	g.Expect(vm.Status).To(Equal("running"))
	g.Expect(vm.Tags()).To(ContainElement("claimscale-cluster.test-cluster"))
}

func TestLoginWithUserAndPassword(t *testing.T) {
	api := fakeAPI(t)
	api.SetUser("claimscale@pve", "correct horse battery staple")
	creds := map[string][]byte{
		proxmox.SecretKeyUsername: []byte("claimscale@pve"),
		proxmox.SecretKeyPassword: []byte("correct horse battery staple"),
		proxmox.SecretKeyCA:       api.CACertPEM(),
	}
	p, err := proxmox.NewFactory(fastTasks)(context.Background(), cloneProvider(api.Endpoint()), provider.Options{ClusterName: clusterName, Credentials: creds})
	if err != nil {
		t.Fatalf("building the provider: %v", err)
	}
	ctx, _ := loggingContext(t)
	if _, err := p.Create(ctx, claim("workers-a1", "2", "4Gi"), provider.CreateOptions{}); err != nil {
		t.Fatalf("Create: %v", err)
	}
	if n := len(api.RequestsTo(http.MethodPost, `^/access/ticket$`)); n != 1 {
		t.Errorf("logged in %d times, want once", n)
	}

	// Tickets expire; the provider logs in again and carries on.
	api.ExpireTickets()
	if _, err := p.List(ctx); err != nil {
		t.Fatalf("List after the tickets expired: %v", err)
	}
	if err := p.Delete(ctx, "proxmox://test-cluster/1000"); err != nil {
		t.Fatalf("Delete after the tickets expired: %v", err)
	}
	if n := len(api.RequestsTo(http.MethodPost, `^/access/ticket$`)); n != 2 {
		t.Errorf("logged in %d times, want twice", n)
	}
}

func TestNewChecksTheConnection(t *testing.T) {
	tests := []struct {
		name     string
		creds    func(api *proxmoxtest.Server) map[string][]byte
		insecure bool
		// wantText is a substring of the terminal error; empty means success.
		wantText string
	}{
		{
			name:  "the CA bundle from the Secret verifies the API",
			creds: tokenCredentials,
		},
		{
			name: "an unknown CA is terminal, with a hint",
			creds: func(api *proxmoxtest.Server) map[string][]byte {
				c := tokenCredentials(api)
				delete(c, proxmox.SecretKeyCA)
				return c
			},
			wantText: "put its CA in the credentials Secret as ca.crt or set spec.proxmox.insecureSkipTLSVerify",
		},
		{
			name: "insecureSkipTLSVerify accepts any certificate",
			creds: func(api *proxmoxtest.Server) map[string][]byte {
				c := tokenCredentials(api)
				delete(c, proxmox.SecretKeyCA)
				return c
			},
			insecure: true,
		},
		{
			name: "a wrong token secret is terminal",
			creds: func(api *proxmoxtest.Server) map[string][]byte {
				c := tokenCredentials(api)
				c[proxmox.SecretKeyTokenSecret] = []byte("wrong-secret")
				return c
			},
			wantText: "the proxmox API rejected the token from the credentials Secret (authentication failure, 401)",
		},
		{
			name: "a wrong password is terminal",
			creds: func(api *proxmoxtest.Server) map[string][]byte {
				return map[string][]byte{
					proxmox.SecretKeyUsername: []byte("claimscale@pve"),
					proxmox.SecretKeyPassword: []byte("wrong password"),
					proxmox.SecretKeyCA:       api.CACertPEM(),
				}
			},
			wantText: "login with the username and password from the credentials Secret failed: authentication failure (401)",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			api := fakeAPI(t)
			api.SetUser("claimscale@pve", "right password")
			np := cloneProvider(api.Endpoint())
			np.Spec.Proxmox.InsecureSkipTLSVerify = tt.insecure
			_, err := proxmox.NewFactory(fastTasks)(context.Background(), np, provider.Options{ClusterName: clusterName, Credentials: tt.creds(api)})
			if tt.wantText == "" {
				if err != nil {
					t.Fatalf("New: %v", err)
				}
				return
			}
			if !provider.IsTerminal(err) || !strings.Contains(err.Error(), tt.wantText) {
				t.Fatalf("New error = %v, want a terminal error containing %q", err, tt.wantText)
			}
		})
	}
}

// TestSecretsStayOutOfErrorsAndLogs drives every failure the provider
// reports through an API that echoes the credentials in its messages, and
// looks for the credentials' values in the errors and the logs.
func TestSecretsStayOutOfErrorsAndLogs(t *testing.T) {
	const (
		username = "claimscale@pve"
		password = "hunter2-password-value"
	)
	echo := "token " + tokenID + "=" + tokenSecret + " user " + username + " password " + password

	type step func(ctx context.Context, api *proxmoxtest.Server, p provider.Provider) error
	create := func(ctx context.Context, _ *proxmoxtest.Server, p provider.Provider) error {
		_, err := p.Create(ctx, claim("workers-a1", "2", "4Gi"), provider.CreateOptions{})
		return err
	}
	tests := []struct {
		name     string
		password bool
		inject   func(api *proxmoxtest.Server)
		run      step
	}{
		{name: "a 500 echoing the token", inject: func(api *proxmoxtest.Server) { api.InjectFault(proxmoxtest.Fault{Status: 500, Message: echo}) }, run: create},
		{name: "a 403 echoing the token", inject: func(api *proxmoxtest.Server) {
			api.InjectFault(proxmoxtest.Fault{Path: `/clone$`, Status: 403, Message: echo})
		}, run: create},
		{name: "a 401", inject: func(api *proxmoxtest.Server) { api.InjectFault(proxmoxtest.Fault{Status: 401, Message: echo}) }, run: create},
		{name: "a failed task echoing the token", inject: func(api *proxmoxtest.Server) {
			api.FailTask(proxmoxtest.TaskFault{Type: "qmclone", ExitStatus: echo})
		}, run: create},
		{name: "a failing task poll, whose path holds the token in the UPID", inject: func(api *proxmoxtest.Server) {
			api.InjectFault(proxmoxtest.Fault{Path: `/tasks/`, Status: 403, Message: "Permission check failed"})
		}, run: create},
		{name: "a refused delete", inject: func(api *proxmoxtest.Server) {
			api.AddVM(proxmoxtest.VM{VMID: 1005, Node: "pve1", Name: "x"})
		}, run: func(ctx context.Context, _ *proxmoxtest.Server, p provider.Provider) error {
			return p.Delete(ctx, "proxmox://test-cluster/1005")
		}},
		{name: "a failed login", password: true, inject: func(api *proxmoxtest.Server) {
			api.ExpireTickets()
			api.SetUser(username, "changed")
		}, run: create},
		{name: "a 500 echoing the password", password: true, inject: func(api *proxmoxtest.Server) {
			api.InjectFault(proxmoxtest.Fault{Path: `/nodes$`, Status: 500, Message: echo})
		}, run: create},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			api := fakeAPI(t)
			creds := tokenCredentials(api)
			secrets := []string{tokenID, tokenSecret}
			if tt.password {
				secrets = []string{username, password}
				api.SetUser(username, password)
				creds = map[string][]byte{proxmox.SecretKeyUsername: []byte(username), proxmox.SecretKeyPassword: []byte(password), proxmox.SecretKeyCA: api.CACertPEM()}
			}
			p, err := proxmox.NewFactory(fastTasks)(context.Background(), cloneProvider(api.Endpoint()), provider.Options{ClusterName: clusterName, Credentials: creds})
			if err != nil {
				t.Fatalf("building the provider: %v", err)
			}
			tt.inject(api)
			ctx, logs := loggingContext(t)

			err = tt.run(ctx, api, p)
			if err == nil {
				t.Fatal("the step succeeded; want an error to inspect")
			}
			for _, s := range secrets {
				if strings.Contains(err.Error(), s) {
					t.Errorf("error %q contains the secret value %q", err, s)
				}
				if strings.Contains(logs.String(), s) {
					t.Errorf("logs contain the secret value %q:\n%s", s, logs)
				}
			}
		})
	}
}

func TestNewRejectsBadSettings(t *testing.T) {
	tests := []struct {
		name     string
		mutate   func(np *v1alpha1.NodeProvider, creds map[string][]byte, opts *provider.Options)
		wantText string
	}{
		{
			name:     "a NodeProvider without proxmox settings",
			mutate:   func(np *v1alpha1.NodeProvider, _ map[string][]byte, _ *provider.Options) { np.Spec.Proxmox = nil },
			wantText: "spec.proxmox is not set",
		},
		{
			name: "both clone and netboot",
			mutate: func(np *v1alpha1.NodeProvider, _ map[string][]byte, _ *provider.Options) {
				np.Spec.Proxmox.Netboot = &v1alpha1.ProxmoxNetboot{}
			},
			wantText: "exactly one of spec.proxmox.clone and spec.proxmox.netboot",
		},
		{
			name: "netboot without a storage for its disk",
			mutate: func(np *v1alpha1.NodeProvider, _ map[string][]byte, _ *provider.Options) {
				np.Spec.Proxmox.Clone, np.Spec.Proxmox.Storage = nil, ""
				np.Spec.Proxmox.Netboot = &v1alpha1.ProxmoxNetboot{}
			},
			wantText: "spec.proxmox.storage must name the storage",
		},
		{
			name: "an upside-down VM ID range",
			mutate: func(np *v1alpha1.NodeProvider, _ map[string][]byte, _ *provider.Options) {
				np.Spec.Proxmox.VMIDRange = v1alpha1.VMIDRange{Lower: 2000, Upper: 1000}
			},
			wantText: "vmIDRange 2000-1000",
		},
		{
			name: "an extra option that would overwrite the ownership markers",
			mutate: func(np *v1alpha1.NodeProvider, _ map[string][]byte, _ *provider.Options) {
				np.Spec.Proxmox.ExtraOptions = []v1alpha1.NameValue{{Name: "tags", Value: "mine"}}
			},
			wantText: `may not set "tags"`,
		},
		{
			name: "an extra option for a NIC networkInterfaces sets",
			mutate: func(np *v1alpha1.NodeProvider, _ map[string][]byte, _ *provider.Options) {
				np.Spec.Proxmox.ExtraOptions = []v1alpha1.NameValue{{Name: "net0", Value: "e1000,bridge=vmbr1"}}
			},
			wantText: `sets "net0"`,
		},
		{
			name: "a hostpci extra option beside pciDevices",
			mutate: func(np *v1alpha1.NodeProvider, _ map[string][]byte, _ *provider.Options) {
				np.Spec.Proxmox.PCIDevices = []v1alpha1.ProxmoxPCIDevice{{Resource: "nvidia.com/gpu", Mapping: "gpu"}}
				np.Spec.Proxmox.ExtraOptions = []v1alpha1.NameValue{{Name: "hostpci0", Value: "mapping=nic"}}
			},
			wantText: `sets "hostpci0", but spec.proxmox.pciDevices is set`,
		},
		{
			name: "one PCI mapping for two resources",
			mutate: func(np *v1alpha1.NodeProvider, _ map[string][]byte, _ *provider.Options) {
				np.Spec.Proxmox.PCIDevices = []v1alpha1.ProxmoxPCIDevice{{Resource: "nvidia.com/gpu", Mapping: "gpu"}, {Resource: "example.com/gpu", Mapping: "gpu"}}
			},
			wantText: "which already serves nvidia.com/gpu",
		},
		{
			name: "a PCI device that is not an extended resource",
			mutate: func(np *v1alpha1.NodeProvider, _ map[string][]byte, _ *provider.Options) {
				np.Spec.Proxmox.PCIDevices = []v1alpha1.ProxmoxPCIDevice{{Resource: "gpu", Mapping: "gpu"}}
			},
			wantText: `spec.proxmox.pciDevices[0].resource "gpu" is not an extended resource`,
		},
		{
			name: "a token without its secret",
			mutate: func(_ *v1alpha1.NodeProvider, creds map[string][]byte, _ *provider.Options) {
				delete(creds, proxmox.SecretKeyTokenSecret)
			},
			wantText: "only one of tokenID and tokenSecret",
		},
		{
			name: "no credentials at all",
			mutate: func(_ *v1alpha1.NodeProvider, creds map[string][]byte, _ *provider.Options) {
				delete(creds, proxmox.SecretKeyTokenSecret)
				delete(creds, proxmox.SecretKeyTokenID)
			},
			wantText: "needs tokenID and tokenSecret (an API token), or username and password",
		},
		{
			name: "a CA bundle that is not PEM",
			mutate: func(_ *v1alpha1.NodeProvider, creds map[string][]byte, _ *provider.Options) {
				creds[proxmox.SecretKeyCA] = []byte("not a certificate")
			},
			wantText: "ca.crt in the credentials Secret holds no PEM certificate",
		},
		{
			name: "a cluster name that cannot be a Proxmox tag",
			mutate: func(_ *v1alpha1.NodeProvider, _ map[string][]byte, opts *provider.Options) {
				opts.ClusterName = "prod/eu"
			},
			wantText: `cluster name "prod/eu" cannot go into a Proxmox tag`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			api := fakeAPI(t)
			np := cloneProvider(api.Endpoint())
			creds := tokenCredentials(api)
			opts := provider.Options{ClusterName: clusterName, Credentials: creds}
			tt.mutate(np, creds, &opts)
			_, err := proxmox.New(context.Background(), np, opts)
			if !provider.IsTerminal(err) || !strings.Contains(err.Error(), tt.wantText) {
				t.Fatalf("New error = %v, want a terminal error containing %q", err, tt.wantText)
			}
			for _, s := range []string{tokenID, tokenSecret} {
				if strings.Contains(err.Error(), s) {
					t.Errorf("error %q contains a credential", err)
				}
			}
		})
	}
}
