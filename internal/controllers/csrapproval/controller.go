// Package csrapproval approves the kubelet client certificate requests made
// with claimscale's per-claim bootstrap tokens, each for its claim's one
// node and only until that node has registered, and denies every other
// request those tokens make, with a reason on the request and an event on
// the claim. Requests of other users are left alone.
//
// kube-controller-manager's own approver (csrapproving) approves a
// bootstrap user's request for any node name once a SubjectAccessReview
// says its groups may create certificatesigningrequests/nodeclient; the
// per-claim tokens carry a group nothing binds to that
// (bootstrap.GroupNodeToken), so this controller is their only approver.
package csrapproval

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"slices"
	"strings"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/tools/events"
	bootstrapapi "k8s.io/cluster-bootstrap/token/api"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/internal/bootstrap"
)

// Name of the controller in logs, metrics and events.
const Name = "csrapproval"

// Reasons on the requests' Approved and Denied conditions.
const (
	ReasonApproved = "ClaimscaleApproved"
	ReasonDenied   = "ClaimscaleDenied"
)

// Reasons of the events on the claim.
const (
	EventApproved = "CertificateApproved"
	EventDenied   = "CertificateDenied"
	// EventIgnored: a request for a signer other than the kubelet
	// client one, which claimscale may not deny (it holds approve on that
	// signer only) and never approves.
	EventIgnored = "CertificateRequestIgnored"
	// EventApprovedElsewhere: another approver (kube-controller-manager
	// with auto-approval bound to the tokens' groups) approved a request
	// claimscale would have denied.
	EventApprovedElsewhere = "CertificateApprovedElsewhere"
)

// bootstrapUserPrefix is how the API server names a bootstrap token's user
// (k8s.io/cluster-bootstrap/token/api.BootstrapUserPrefix).
const bootstrapUserPrefix = bootstrapapi.BootstrapUserPrefix

// Tokens finds the claim a bootstrap token was issued for.
type Tokens interface {
	Lookup(ctx context.Context, id string) (*bootstrap.Issued, error)
}

// Controller reconciles pending certificate signing requests of bootstrap
// users.
type Controller struct {
	// Kube reads requests, claims and nodes from the cache and writes
	// approvals.
	Kube     client.Client
	Tokens   Tokens
	Recorder events.EventRecorder
	Clock    clock.PassiveClock
}

// SetupWithManager registers the controller for pending requests of
// bootstrap users.
func (c *Controller) SetupWithManager(mgr ctrl.Manager) error {
	if c.Clock == nil {
		c.Clock = clock.RealClock{}
	}
	undecided := func(object client.Object) bool {
		csr, ok := object.(*certificatesv1.CertificateSigningRequest)
		return ok && pending(csr) && strings.HasPrefix(csr.Spec.Username, bootstrapUserPrefix)
	}
	ours := predicate.Funcs{
		CreateFunc:  func(e event.CreateEvent) bool { return undecided(e.Object) },
		DeleteFunc:  func(event.DeleteEvent) bool { return false },
		GenericFunc: func(e event.GenericEvent) bool { return undecided(e.Object) },
		// An approval by someone else is looked at once, when it happens.
		UpdateFunc: func(e event.UpdateEvent) bool {
			if undecided(e.ObjectNew) {
				return true
			}
			old, okOld := e.ObjectOld.(*certificatesv1.CertificateSigningRequest)
			csr, okNew := e.ObjectNew.(*certificatesv1.CertificateSigningRequest)
			return okOld && okNew && undecided(old) && approvedElsewhere(csr)
		},
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named(Name).
		For(&certificatesv1.CertificateSigningRequest{}, builder.WithPredicates(ours)).
		Complete(c)
}

// Reconcile decides one request.
func (c *Controller) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	var csr certificatesv1.CertificateSigningRequest
	if err := c.Kube.Get(ctx, req.NamespacedName, &csr); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if !strings.HasPrefix(csr.Spec.Username, bootstrapUserPrefix) || (!pending(&csr) && !approvedElsewhere(&csr)) {
		return reconcile.Result{}, nil
	}
	issued, err := c.Tokens.Lookup(ctx, strings.TrimPrefix(csr.Spec.Username, bootstrapUserPrefix))
	if err != nil || issued == nil {
		// No token of claimscale's: another joiner's request.
		return reconcile.Result{}, err
	}
	claim, err := c.claimOf(ctx, issued)
	if err != nil {
		return reconcile.Result{}, err
	}
	v, err := c.judge(ctx, &csr, issued, claim)
	if err != nil {
		return reconcile.Result{}, err
	}
	logger := log.FromContext(ctx).WithValues("csr", csr.Name, "token", issued.ID, "nodeclaim", issued.ClaimName)
	if !pending(&csr) {
		if !v.approve && !v.ignore {
			logger.Error(nil, "another approver approved a certificate request claimscale denies: nothing may bind auto-approval to the bootstrap token groups", "why", v.message)
			if claim != nil {
				c.Recorder.Eventf(claim, &csr, corev1.EventTypeWarning, EventApprovedElsewhere, "Review",
					"certificate request %s of the claim's bootstrap token %s was approved by another approver, though claimscale denies it: %s; remove the binding of certificatesigningrequests/nodeclient to %s or %s",
					csr.Name, issued.ID, v.message, bootstrapapi.BootstrapDefaultGroup, bootstrap.GroupNodeToken)
			}
		}
		return reconcile.Result{}, nil
	}
	if v.ignore {
		logger.Info("not deciding a certificate request of a claim's token", "signer", csr.Spec.SignerName, "why", v.message)
		if claim != nil {
			c.Recorder.Eventf(claim, &csr, corev1.EventTypeWarning, EventIgnored, "Review",
				"certificate request %s of the claim's bootstrap token %s left undecided: %s", csr.Name, issued.ID, v.message)
		}
		return reconcile.Result{}, nil
	}
	condition := certificatesv1.CertificateSigningRequestCondition{
		Type: certificatesv1.CertificateDenied, Status: corev1.ConditionTrue, Reason: ReasonDenied, Message: v.message,
	}
	if v.approve {
		condition.Type, condition.Reason = certificatesv1.CertificateApproved, ReasonApproved
	}
	csr.Status.Conditions = append(csr.Status.Conditions, condition)
	if err := c.Kube.SubResource("approval").Update(ctx, &csr); err != nil {
		if apierrors.IsNotFound(err) {
			return reconcile.Result{}, nil
		}
		return reconcile.Result{}, fmt.Errorf("recording the %s of certificate request %s: %w", strings.ToLower(string(condition.Type)), csr.Name, err)
	}
	logger.Info("decided a certificate request of a claim's token", "decision", condition.Type, "why", v.message)
	if claim == nil {
		return reconcile.Result{}, nil
	}
	if v.approve {
		c.Recorder.Eventf(claim, &csr, corev1.EventTypeNormal, EventApproved, "Approve",
			"approved the kubelet client certificate request %s of the claim's bootstrap token %s for node %s", csr.Name, issued.ID, claim.Name)
	} else {
		c.Recorder.Eventf(claim, &csr, corev1.EventTypeWarning, EventDenied, "Deny",
			"denied certificate request %s of the claim's bootstrap token %s: %s", csr.Name, issued.ID, v.message)
	}
	return reconcile.Result{}, nil
}

// claimOf returns the token's claim, or nil when it is gone (or is
// another claim of the same name).
func (c *Controller) claimOf(ctx context.Context, issued *bootstrap.Issued) (*v1alpha1.NodeClaim, error) {
	var claim v1alpha1.NodeClaim
	if err := c.Kube.Get(ctx, client.ObjectKey{Name: issued.ClaimName}, &claim); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("getting claim %s of bootstrap token %s: %w", issued.ClaimName, issued.ID, err)
	}
	if claim.UID != issued.ClaimUID {
		return nil, nil
	}
	return &claim, nil
}

// verdict is the decision on one request.
type verdict struct {
	approve bool
	// ignore: neither approve nor deny.
	ignore  bool
	message string
}

func deny(format string, args ...any) verdict {
	return verdict{message: fmt.Sprintf(format, args...)}
}

// judge approves a request only when all of these hold: its user is the
// bootstrap user of a live token claimscale issued for claim C (and the
// API server authenticated it as a bootstrap token); it asks signer
// kubernetes.io/kube-apiserver-client-kubelet for subject
// system:node:<C's node name> in organization system:nodes, with no
// subject alternative names and exactly the kubelet client usages; C is
// not being deleted and has no Node yet; and no other request of the
// token was approved. The checks of the subject and usages are those of
// kube-controller-manager's ValidateKubeletClientCSR
// (pkg/apis/certificates/helpers.go); the node name and the registration
// are what it never checks.
func (c *Controller) judge(ctx context.Context, csr *certificatesv1.CertificateSigningRequest, issued *bootstrap.Issued, claim *v1alpha1.NodeClaim) (verdict, error) {
	if csr.Spec.SignerName != certificatesv1.KubeAPIServerClientKubeletSignerName {
		return verdict{ignore: true, message: fmt.Sprintf("a claim's token gets a kubelet client certificate (signer %s) and nothing else; claimscale never approves signer %s",
			certificatesv1.KubeAPIServerClientKubeletSignerName, csr.Spec.SignerName)}, nil
	}
	if claim == nil {
		return deny("bootstrap token %s was issued for NodeClaim %s, which no longer exists", issued.ID, issued.ClaimName), nil
	}
	if !slices.Contains(csr.Spec.Groups, bootstrapapi.BootstrapDefaultGroup) {
		return deny("the requester %s was not authenticated by a bootstrap token (not in group %s)", csr.Spec.Username, bootstrapapi.BootstrapDefaultGroup), nil
	}
	if !claim.DeletionTimestamp.IsZero() {
		return deny("NodeClaim %s is being deleted", claim.Name), nil
	}
	if issued.Deleting {
		return deny("bootstrap token %s has been revoked", issued.ID), nil
	}
	if !c.Clock.Now().Before(issued.ExpiresAt) {
		return deny("bootstrap token %s expired at %s", issued.ID, issued.ExpiresAt.UTC().Format("2006-01-02T15:04:05Z")), nil
	}
	request, err := parse(csr.Spec.Request)
	if err != nil {
		return deny("the request cannot be parsed: %v", err), nil
	}
	node := claim.Name
	if want := "system:node:" + node; request.Subject.CommonName != want {
		return deny("it asks for subject %q, but the token of NodeClaim %s joins node %s only (subject %q)", request.Subject.CommonName, claim.Name, node, want), nil
	}
	if !slices.Equal(request.Subject.Organization, []string{"system:nodes"}) {
		return deny("its subject's organization is %q, not [\"system:nodes\"]", request.Subject.Organization), nil
	}
	if len(request.DNSNames)+len(request.IPAddresses)+len(request.EmailAddresses)+len(request.URIs) > 0 {
		return deny("a kubelet client certificate has no subject alternative names"), nil
	}
	if !kubeletClientUsages(csr.Spec.Usages) {
		return deny("its key usages %q are not exactly a kubelet client's (digital signature and client auth, optionally key encipherment)", csr.Spec.Usages), nil
	}
	registered, err := c.registered(ctx, claim)
	if err != nil {
		return verdict{}, err
	}
	if registered != "" {
		return deny("NodeClaim %s already has its node (%s): its token joins one node, once", claim.Name, registered), nil
	}
	other, err := c.otherApproved(ctx, csr)
	if err != nil {
		return verdict{}, err
	}
	if other != "" {
		return deny("certificate request %s of the same token was already approved: a token gets one certificate", other), nil
	}
	return verdict{approve: true, message: fmt.Sprintf("claimscale: the kubelet client certificate of node %s, requested with the bootstrap token of its NodeClaim %s", node, claim.Name)}, nil
}

// registered says why the claim counts as having its node: its Registered
// condition, its recorded node name, or a Node of its name. Empty when it
// has none.
func (c *Controller) registered(ctx context.Context, claim *v1alpha1.NodeClaim) (string, error) {
	if meta.IsStatusConditionTrue(claim.Status.Conditions, v1alpha1.ConditionRegistered) || claim.Status.NodeName != "" {
		return "registered", nil
	}
	var node corev1.Node
	err := c.Kube.Get(ctx, client.ObjectKey{Name: claim.Name}, &node)
	switch {
	case err == nil:
		return "a Node named " + claim.Name + " exists", nil
	case apierrors.IsNotFound(err):
		return "", nil
	}
	return "", fmt.Errorf("getting node %s: %w", claim.Name, err)
}

// otherApproved returns the name of another approved request of the same
// bootstrap user, if any.
func (c *Controller) otherApproved(ctx context.Context, csr *certificatesv1.CertificateSigningRequest) (string, error) {
	var list certificatesv1.CertificateSigningRequestList
	if err := c.Kube.List(ctx, &list); err != nil {
		return "", fmt.Errorf("listing certificate signing requests: %w", err)
	}
	for i := range list.Items {
		other := &list.Items[i]
		if other.Name != csr.Name && other.Spec.Username == csr.Spec.Username && approved(other) {
			return other.Name, nil
		}
	}
	return "", nil
}

// kubeletClientUsages: exactly digital signature and client auth, with key
// encipherment or without (RSA keys need it).
func kubeletClientUsages(usages []certificatesv1.KeyUsage) bool {
	set := map[certificatesv1.KeyUsage]bool{}
	for _, u := range usages {
		set[u] = true
	}
	delete(set, certificatesv1.UsageKeyEncipherment)
	return len(set) == 2 && set[certificatesv1.UsageDigitalSignature] && set[certificatesv1.UsageClientAuth]
}

func parse(request []byte) (*x509.CertificateRequest, error) {
	block, _ := pem.Decode(request)
	if block == nil || block.Type != "CERTIFICATE REQUEST" {
		return nil, fmt.Errorf("no PEM block of type CERTIFICATE REQUEST")
	}
	parsed, err := x509.ParseCertificateRequest(block.Bytes)
	if err != nil {
		return nil, err
	}
	if err := parsed.CheckSignature(); err != nil {
		return nil, fmt.Errorf("its signature: %w", err)
	}
	return parsed, nil
}

// pending: neither approved nor denied nor failed, and no certificate yet.
func pending(csr *certificatesv1.CertificateSigningRequest) bool {
	if len(csr.Status.Certificate) > 0 {
		return false
	}
	for _, condition := range csr.Status.Conditions {
		switch condition.Type {
		case certificatesv1.CertificateApproved, certificatesv1.CertificateDenied, certificatesv1.CertificateFailed:
			if condition.Status == corev1.ConditionTrue {
				return false
			}
		}
	}
	return true
}

// approvedElsewhere: approved, by another approver than claimscale.
func approvedElsewhere(csr *certificatesv1.CertificateSigningRequest) bool {
	for _, condition := range csr.Status.Conditions {
		if condition.Type == certificatesv1.CertificateApproved && condition.Status == corev1.ConditionTrue && condition.Reason != ReasonApproved {
			return true
		}
	}
	return false
}

func approved(csr *certificatesv1.CertificateSigningRequest) bool {
	for _, condition := range csr.Status.Conditions {
		if condition.Type == certificatesv1.CertificateApproved && condition.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}
