// Package simulated is a provider.Provider whose machines are records in the
// API server and whose "boot" registers a Node object run by kwok, so the
// whole claim → machine → Node → Running pod path can be exercised on a local
// control plane, with injected failures, and without any infrastructure.
//
// A machine is one ConfigMap, written through Config.Kube (the provider gets
// its client from its factory, not from provider.Options), in the
// controller's namespace (Options.Namespace),
// named after its claim, labelled claimscale.io/simulated-machine=true and
// carrying the ownership tags both as annotations (exact values, which decide
// ownership) and as labels (for selection; a value that is not a valid label
// value is replaced by a hash). Its data holds the shape, zone, creation and
// boot times, whether it will never register, and the Node it will register,
// so a restarted controller carries on where the last one stopped.
//
// A machine created with user data (provider.CreateOptions.UserData) keeps
// it in a Secret of the machine's name beside the record, since it carries
// a join token, and the record says so. Such a machine joins as a kubelet's
// TLS bootstrap would: the registrar finds the bootstrap token in the user
// data, authenticates with it, submits a kubelet client CSR, and once the
// control plane has approved and signed it, creates the Node with the issued
// certificate, as system:node:<name>. A token that is unknown, revoked or
// expired fails, and the Node is never made. Without user data the
// registrar creates the Node itself.
//
// A Registrar registers the Node of every machine whose boot time has passed.
// New starts one per (namespace, cluster name) in the process and keeps it
// running while any context given to New for that pair is live; pass a
// long-lived context (the manager's), not a request's. Config.ExternalRegistrar
// turns that off for callers that run NewRegistrar(...).Start themselves.
// It polls every PollInterval while a machine waits to register, and
// otherwise every five seconds or when Create in the same process makes a
// machine.
//
// A machine can sleep (provider.PowerManager): Suspend records in its
// ConfigMap when it stopped, and the registrar leaves it alone, so its
// Node, which the claim lifecycle deletes after the stop, does not come
// back; Get and List report it Suspended, with its tags. Resume records
// when it started, moves its boot time to now plus the NodeProvider's
// startDelay (default 1s, shorter than the 2s bootDelay, as starting a
// stopped machine is quicker than making one) and the registrar registers
// the same Node again then: same name, same providerID, and for a machine
// with user data as system:node:<name> with the certificate its bootstrap
// was issued (see bootstrapKubelet). Both are idempotent and refuse a
// machine of another cluster; Delete works on a sleeping machine as on
// any. A Node the registrar made while the machine was being stopped is
// removed again.
//
// The registered Node's capacity is the shape's cpu and memory, the pool's
// maxPods (default 110) and 100Gi of ephemeral storage; its allocatable is
// that capacity less what the pool's kubelet settings reserve (kubeReserved,
// systemReserved and the memory.available / nodefs.available hard eviction
// thresholds the pool states; the kubelet's built-in eviction defaults are
// not assumed), as a kubelet with those settings would report it.
package simulated
