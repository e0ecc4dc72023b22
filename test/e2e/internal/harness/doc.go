// Package harness is what the end-to-end scenario packages under test/e2e
// share: the control plane each package's TestMain starts (Main), the
// in-process controllers a scenario runs (StartOperator), and the scenario
// helpers (a namespace, provider and pool named after the test, and the
// reads, watches and tools the scenarios use). A helper used by one test
// file stays in that file; one used by two files lives here, so a file can
// move between packages unchanged but for its package clause.
package harness
