// Package plugin carries provider.Provider over the claimscale.provider.v1
// gRPC protocol (package pluginpb), both ways: Client is the provider of a
// grpc NodeProvider, which calls a plugin outside claimscale; Server serves
// any provider.Provider as such a plugin, for plugins written in Go (the
// reference plugin, cmd/claimscale-provider-example, is one).
//
// Errors keep their kind across the wire: a provider's NotFound,
// InsufficientCapacity, Terminal and Retryable errors travel as the status
// codes the proto documents (Retryable's wait as google.rpc.RetryInfo), and
// come back as the same kinds. A plugin that cannot be reached gives a
// retryable error that is also a net.Error, so claimscale's resolver and
// NodeProvider status controller see it as Unreachable.
package plugin
