// Package telemetry sets up agentd's OpenTelemetry traces: off unless the
// standard OTEL_* variables name an OTLP endpoint, then exported over OTLP
// HTTP, with W3C trace context propagation. Spans follow the GenAI
// semantic conventions: invoke_agent per run execution, chat per model
// call, execute_tool per tool attempt.
//
// It imports nothing of agentd's.
package telemetry
