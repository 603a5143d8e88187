// Package lifecycle gives agentd's background parts one shape, Service
// (Start, Stop, both with a context, both safe to call twice), and Group,
// the list that starts them in order and stops them in reverse: what
// started stops when a later part fails to start, and a shutdown says
// which parts did not stop in time.
//
// It imports nothing of agentd's.
package lifecycle
