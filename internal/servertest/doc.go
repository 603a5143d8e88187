// Package servertest runs agentd as a real process for the tests of its
// clients (the Go SDK, agentctl): built once per test binary, started on
// an address and a database of the test's, killed with SIGKILL.
//
// It is for tests only, and imports nothing of agentd's: it builds
// cmd/server with the go command.
package servertest
