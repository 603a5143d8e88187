// Package webhooktest is a webhook server for tests: a Sink whose answer on
// each path is declared by the test (answer, fail the first times, hang,
// block until released, reconcile), and which counts every request by path
// and idempotency key, so that a test can tell how many times an effect
// happened. It is for tests only.
//
// It imports nothing of agentd's, so that the tests of internal/tools itself
// can use it.
package webhooktest
