package fake

import (
	"context"
	"errors"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/pkg/provider"
	"github.com/claimscale/claimscale/pkg/provider/conformance"
)

var small = provider.Shape{Name: "small", Capacity: corev1.ResourceList{
	corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("4Gi"),
}, Price: 0.1}

func pool() *v1alpha1.NodePool {
	return &v1alpha1.NodePool{ObjectMeta: metav1.ObjectMeta{Name: "general"}}
}

func claim(name string) *v1alpha1.NodeClaim {
	return &v1alpha1.NodeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1alpha1.NodeClaimSpec{
			NodePoolRef: v1alpha1.NodePoolReference{Name: "general"},
			Shape:       v1alpha1.ClaimShape{Name: small.Name, CPU: resource.MustParse("2"), Memory: resource.MustParse("4Gi")},
		},
	}
}

func TestFakeKeepsTheProviderContract(t *testing.T) {
	conformance.Run(t, func(t *testing.T) conformance.Harness {
		infra := NewInfrastructure(small)
		ours := infra.Provider("ours")
		return conformance.Harness{
			Provider: ours, ClusterName: "ours", Foreign: infra.Provider("theirs"),
			Pool: pool(), UnknownProviderID: ProviderIDPrefix + "ours/none",
			ErrorCases: []conformance.ErrorCase{
				{Name: "an injected capacity error", Want: conformance.InsufficientCapacity, Call: func(ctx context.Context) error {
					infra.FailNext(Create, provider.NewInsufficientCapacity(errors.New("no room")))
					_, err := ours.Create(ctx, claim("capacity"), provider.CreateOptions{})
					return err
				}},
				{Name: "an injected terminal error", Want: conformance.Terminal, Call: func(ctx context.Context) error {
					infra.FailNext(Shapes, provider.NewTerminal(errors.New("bad credentials")))
					_, err := ours.Shapes(ctx, pool())
					return err
				}},
				{Name: "an injected plain error", Want: conformance.Retryable, Call: func(ctx context.Context) error {
					infra.FailNext(List, errors.New("connection reset"))
					_, err := ours.List(ctx)
					return err
				}},
			},
		}
	})
}

func TestInjectedErrorsAnswerInOrderThenStop(t *testing.T) {
	p := New("ours", small)
	full := provider.NewInsufficientCapacity(errors.New("no room"))
	p.FailNext(Create, full, provider.NewRetryable(errors.New("busy"), time.Second))
	if _, err := p.Create(t.Context(), claim("a"), provider.CreateOptions{}); !provider.IsInsufficientCapacity(err) {
		t.Fatalf("first Create answered %v, want the capacity error", err)
	}
	if _, err := p.Create(t.Context(), claim("a"), provider.CreateOptions{}); provider.RetryAfter(err) != time.Second {
		t.Fatalf("second Create answered %v, want the retryable error asking for 1s", err)
	}
	if _, err := p.Create(t.Context(), claim("a"), provider.CreateOptions{}); err != nil {
		t.Fatalf("third Create answered %v, want the machine", err)
	}
	creates := p.Calls(Create)
	if len(creates) != 3 || creates[0].Err != full || creates[2].ProviderID != ProviderIDPrefix+"ours/a" {
		t.Fatalf("recorded Creates %+v, want three of claim a, the first failed, the last made the machine", creates)
	}
	if machines := p.Machines(); len(machines) != 1 {
		t.Fatalf("failed Creates made machines: %v", machines)
	}
}

func TestStickyFailureLastsUntilRecover(t *testing.T) {
	p := New("ours", small)
	p.Fail(Shapes, provider.NewTerminal(errors.New("bad credentials")))
	for range 3 {
		if _, err := p.Shapes(t.Context(), pool()); !provider.IsTerminal(err) {
			t.Fatalf("Shapes answered %v while failing, want the terminal error", err)
		}
	}
	p.Recover(Shapes)
	if shapes, err := p.Shapes(t.Context(), pool()); err != nil || len(shapes) != 1 {
		t.Fatalf("Shapes answered %v, %v after Recover, want the one shape", shapes, err)
	}
}

func TestCreateInProgressReportsTheMachineOnlyAfterTheWait(t *testing.T) {
	p := New("ours", small)
	p.CreateInProgress(2, 10*time.Second)
	for i := range 2 {
		_, err := p.Create(t.Context(), claim("slow"), provider.CreateOptions{})
		if !provider.IsInProgress(err) || provider.RetryAfter(err) != 10*time.Second {
			t.Fatalf("Create %d answered %v, want in progress asking for 10s", i+1, err)
		}
		if machines := p.Machines(); len(machines) != 1 || machines[0].State != provider.InstanceCreating {
			t.Fatalf("while in progress the machines are %+v, want one Creating", machines)
		}
	}
	machine, err := p.Create(t.Context(), claim("slow"), provider.CreateOptions{})
	if err != nil || machine.State != provider.InstanceRunning {
		t.Fatalf("third Create answered %+v, %v, want the running machine", machine, err)
	}
	if !p.SetState(machine.ProviderID, provider.InstanceStopping) {
		t.Fatal("SetState did not find the machine")
	}
	if got, _ := p.Get(t.Context(), machine.ProviderID); got.State != provider.InstanceStopping {
		t.Fatalf("after SetState the machine is %s, want Stopping", got.State)
	}
}
