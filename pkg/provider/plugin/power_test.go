package plugin

import (
	"context"
	"errors"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/pkg/provider"
	"github.com/claimscale/claimscale/pkg/provider/conformance"
	"github.com/claimscale/claimscale/pkg/provider/fake"
	"github.com/claimscale/claimscale/pkg/provider/plugin/pluginpb"
)

var small = provider.Shape{Name: "small", Capacity: corev1.ResourceList{
	corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("4Gi"),
}}

func powerClaim(name string) *v1alpha1.NodeClaim {
	return &v1alpha1.NodeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1alpha1.NodeClaimSpec{
			NodePoolRef: v1alpha1.NodePoolReference{Name: "general"},
			Shape:       v1alpha1.ClaimShape{Name: small.Name, CPU: resource.MustParse("2"), Memory: resource.MustParse("4Gi")},
		},
	}
}

// servedFake serves a fake provider of cluster "c" as a plugin.
func servedFake(t *testing.T, infra *fake.Infrastructure) *Client {
	return serve(t, func(g *grpc.Server) { NewServer(infra.Provider("c"), "c", nil).Register(g) }, nil)
}

// oldPlugin is a plugin built against claimscale.provider.v1 before the
// power calls: the generated base answers UNIMPLEMENTED to Suspend and
// Resume, and its Capabilities know no power flag. The provider behind it
// could manage power; the plugin does not offer it.
type oldPlugin struct {
	pluginpb.UnimplementedProviderServer
	inner *Server
}

func (o oldPlugin) Create(ctx context.Context, r *pluginpb.CreateRequest) (*pluginpb.CreateResponse, error) {
	return o.inner.Create(ctx, r)
}
func (o oldPlugin) Delete(ctx context.Context, r *pluginpb.DeleteRequest) (*pluginpb.DeleteResponse, error) {
	return o.inner.Delete(ctx, r)
}
func (o oldPlugin) Get(ctx context.Context, r *pluginpb.GetRequest) (*pluginpb.GetResponse, error) {
	return o.inner.Get(ctx, r)
}
func (o oldPlugin) List(ctx context.Context, r *pluginpb.ListRequest) (*pluginpb.ListResponse, error) {
	return o.inner.List(ctx, r)
}
func (o oldPlugin) Shapes(ctx context.Context, r *pluginpb.ShapesRequest) (*pluginpb.ShapesResponse, error) {
	return o.inner.Shapes(ctx, r)
}
func (o oldPlugin) Capabilities(context.Context, *pluginpb.CapabilitiesRequest) (*pluginpb.CapabilitiesResponse, error) {
	return &pluginpb.CapabilitiesResponse{ProtocolVersion: 1}, nil
}

// boastingPlugin says power in its Capabilities but serves no power calls.
type boastingPlugin struct{ oldPlugin }

func (boastingPlugin) Capabilities(context.Context, *pluginpb.CapabilitiesRequest) (*pluginpb.CapabilitiesResponse, error) {
	return &pluginpb.CapabilitiesResponse{ProtocolVersion: 1, Power: true}, nil
}

func TestPowerCallsReachTheProviderOverTheWire(t *testing.T) {
	ctx := t.Context()
	infra := fake.NewInfrastructure(small)
	client := servedFake(t, infra)
	if !provider.CanManagePower(ctx, client) {
		t.Fatal("a plugin serving a provider that manages power says it cannot")
	}
	machine, err := client.Create(ctx, powerClaim("sleepy"), provider.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, step := range []struct {
		name string
		call func(context.Context, string) error
		want provider.InstanceState
	}{
		{"Suspend", client.Suspend, provider.InstanceSuspended},
		{"a second Suspend", client.Suspend, provider.InstanceSuspended},
		{"Resume", client.Resume, provider.InstanceRunning},
	} {
		if err := step.call(ctx, machine.ProviderID); err != nil {
			t.Fatalf("%s answered %v", step.name, err)
		}
		got, err := client.Get(ctx, machine.ProviderID)
		if err != nil || got.State != step.want {
			t.Fatalf("after %s, Get over the wire answered %+v, %v; want state %s", step.name, got, err, step.want)
		}
		if step.want == provider.InstanceSuspended && got.ClaimName() != "sleepy" {
			t.Fatalf("a suspended machine came over the wire without its tags: %v", got.Tags)
		}
	}
	calls := infra.Calls(fake.Suspend, fake.Resume)
	if len(calls) != 3 || calls[0].Method != fake.Suspend || calls[2].Method != fake.Resume || calls[2].ProviderID != machine.ProviderID {
		t.Fatalf("the provider behind the plugin received %+v, want Suspend, Suspend, Resume of %s", calls, machine.ProviderID)
	}
}

// The power calls' errors keep their kind both ways: what the provider
// behind the plugin said is what the claim lifecycle acts on.
func TestPowerErrorsKeepTheirKindOverTheWire(t *testing.T) {
	for _, tc := range []struct {
		name   string
		method fake.Method
		err    error
		is     func(error) bool
	}{
		{"a Resume without memory on the host is insufficient capacity", fake.Resume, provider.NewInsufficientCapacity(errors.New("no memory free on pve1")), provider.IsInsufficientCapacity},
		{"a machine gone is not-found", fake.Suspend, provider.NewNotFound("machine gone"), provider.IsNotFound},
		{"a refused Suspend is terminal", fake.Suspend, provider.NewTerminal(errors.New("not ours")), provider.IsTerminal},
		{"a Suspend the provider cannot do is not supported", fake.Suspend, provider.NewNotSupported("this VM has no guest agent"), provider.IsNotSupported},
		{"a Resume the provider cannot do is not supported", fake.Resume, provider.NewNotSupported("power is off at the PDU"), provider.IsNotSupported},
		{"a shutdown that timed out is retryable", fake.Suspend, errors.New("shutdown timed out"), provider.IsRetryable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			infra := fake.NewInfrastructure(small)
			client := servedFake(t, infra)
			machine, err := client.Create(ctx, powerClaim("a"), provider.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			// Every attempt: the client's retry policy asks again on
			// UNAVAILABLE.
			infra.Fail(tc.method, tc.err)
			call := map[fake.Method]func(context.Context, string) error{fake.Suspend: client.Suspend, fake.Resume: client.Resume}[tc.method]
			err = call(ctx, machine.ProviderID)
			if !tc.is(err) {
				t.Fatalf("%s answered %v, not of the provider's kind", tc.method, err)
			}
			if !strings.Contains(err.Error(), tc.err.Error()) {
				t.Fatalf("%s answered %q, which lost the provider's message %q", tc.method, err, tc.err)
			}
		})
	}
}

func TestAPluginWithoutThePowerCallsCannotManagePower(t *testing.T) {
	for _, tc := range []struct {
		name     string
		register func(infra *fake.Infrastructure) func(*grpc.Server)
		asked    bool // whether the client reaches the power call at all
	}{
		{"an old plugin, without the calls and the flag", func(infra *fake.Infrastructure) func(*grpc.Server) {
			return func(g *grpc.Server) {
				pluginpb.RegisterProviderServer(g, oldPlugin{inner: NewServer(infra.Provider("c"), "c", nil)})
			}
		}, false},
		{"a plugin whose Capabilities say power but whose calls are UNIMPLEMENTED", func(infra *fake.Infrastructure) func(*grpc.Server) {
			return func(g *grpc.Server) {
				pluginpb.RegisterProviderServer(g, boastingPlugin{oldPlugin{inner: NewServer(infra.Provider("c"), "c", nil)}})
			}
		}, true},
		{"a plugin whose provider cannot manage power", func(infra *fake.Infrastructure) func(*grpc.Server) {
			infra.DisablePower()
			return func(g *grpc.Server) { NewServer(infra.Provider("c"), "c", nil).Register(g) }
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			infra := fake.NewInfrastructure(small)
			client := serve(t, tc.register(infra), nil)
			machine, err := client.Create(ctx, powerClaim("a"), provider.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if tc.asked != provider.CanManagePower(ctx, client) {
				t.Fatalf("CanManagePower before a power call = %v, want %v", !tc.asked, tc.asked)
			}
			for name, call := range map[string]func(context.Context, string) error{"Suspend": client.Suspend, "Resume": client.Resume} {
				if err := call(ctx, machine.ProviderID); !provider.IsNotSupported(err) {
					t.Fatalf("%s answered %v, want not supported (claimscale deletes instead)", name, err)
				}
			}
			if provider.CanManagePower(ctx, client) {
				t.Fatal("CanManagePower after the plugin answered UNIMPLEMENTED is true")
			}
			if got, _ := client.Get(ctx, machine.ProviderID); got.State != provider.InstanceRunning {
				t.Fatalf("the machine is %s after refused power calls, want it running", got.State)
			}
			if calls := infra.Calls(fake.Suspend, fake.Resume); len(calls) > 0 && !provider.IsNotSupported(calls[0].Err) {
				t.Fatalf("the provider behind a plugin that offers no power received %+v", calls)
			}
		})
	}
}

// The conformance kit's sleep checks skip an old plugin, with their note,
// and its other checks still pass.
func TestTheSleepChecksSkipAnOldPlugin(t *testing.T) {
	conformance.Run(t, func(t *testing.T) conformance.Harness {
		infra := fake.NewInfrastructure(small)
		client := serve(t, func(g *grpc.Server) {
			pluginpb.RegisterProviderServer(g, oldPlugin{inner: NewServer(infra.Provider("c"), "c", nil)})
		}, nil)
		if provider.CanManagePower(t.Context(), client) {
			t.Fatal("an old plugin says it can manage power")
		}
		return conformance.Harness{
			Provider: client, ClusterName: "c", Foreign: infra.Provider("theirs"),
			Pool:              &v1alpha1.NodePool{ObjectMeta: metav1.ObjectMeta{Name: "general"}},
			UnknownProviderID: fake.ProviderIDPrefix + "c/none",
			ErrorCases: []conformance.ErrorCase{{Name: "an injected capacity error", Want: conformance.InsufficientCapacity, Call: func(ctx context.Context) error {
				infra.FailNext(fake.Create, provider.NewInsufficientCapacity(errors.New("no room")))
				_, err := client.Create(ctx, powerClaim("capacity"), provider.CreateOptions{})
				return err
			}}},
		}
	})
}

func TestAServerOverAProviderWithoutPowerAnswersUnimplemented(t *testing.T) {
	ctx := t.Context()
	server := NewServer(providerWithoutPower{fake.New("c", small)}, "c", &pluginpb.CapabilitiesResponse{Power: true})
	capabilities, err := server.Capabilities(ctx, &pluginpb.CapabilitiesRequest{})
	if err != nil || capabilities.GetPower() {
		t.Fatalf("Capabilities = %v, %v; want no power, whatever NewServer was given", capabilities, err)
	}
	if _, err := server.Suspend(ctx, &pluginpb.SuspendRequest{Cluster: "c", ProviderId: "fake://c/a"}); status.Code(err) != codes.Unimplemented {
		t.Fatalf("Suspend answered %v, want UNIMPLEMENTED", err)
	}
	if _, err := server.Resume(ctx, &pluginpb.ResumeRequest{Cluster: "c", ProviderId: "fake://c/a"}); status.Code(err) != codes.Unimplemented {
		t.Fatalf("Resume answered %v, want UNIMPLEMENTED", err)
	}
	if _, err := server.Suspend(ctx, &pluginpb.SuspendRequest{Cluster: "other", ProviderId: "fake://c/a"}); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("Suspend for another cluster answered %v, want FAILED_PRECONDITION", err)
	}
}

// providerWithoutPower hides the fake's power calls.
type providerWithoutPower struct{ provider.Provider }
