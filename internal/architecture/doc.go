// Package architecture holds the tests that keep the layout honest: which
// package may import which, so that dependencies point one way, and that
// the troubleshooting guide names every condition reason the API defines.
// It has no code of its own.
package architecture
