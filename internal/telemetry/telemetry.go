package telemetry

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// Name is the instrumentation scope of agentd's spans.
const Name = "agentd"

// Attribute keys of agentd's own.
const (
	RunID     = attribute.Key("agentd.run_id")
	Step      = attribute.Key("agentd.step")
	Attempt   = attribute.Key("agentd.attempt")
	Effect    = attribute.Key("agentd.effect")
	Epoch     = attribute.Key("agentd.epoch")
	Recovered = attribute.Key("agentd.recovered")
)

// GenAI semantic convention keys.
const (
	OperationName  = attribute.Key("gen_ai.operation.name")
	ProviderName   = attribute.Key("gen_ai.provider.name")
	AgentName      = attribute.Key("gen_ai.agent.name")
	ConversationID = attribute.Key("gen_ai.conversation.id")
	RequestModel   = attribute.Key("gen_ai.request.model")
	ResponseModel  = attribute.Key("gen_ai.response.model")
	InputTokens    = attribute.Key("gen_ai.usage.input_tokens")
	OutputTokens   = attribute.Key("gen_ai.usage.output_tokens")
	FinishReasons  = attribute.Key("gen_ai.response.finish_reasons")
	ToolName       = attribute.Key("gen_ai.tool.name")
	ToolCallID     = attribute.Key("gen_ai.tool.call.id")
	ToolType       = attribute.Key("gen_ai.tool.type")
	InputMessages  = attribute.Key("gen_ai.input.messages")
	OutputMessages = attribute.Key("gen_ai.output.messages")
	ToolArguments  = attribute.Key("gen_ai.tool.call.arguments")
	ToolResult     = attribute.Key("gen_ai.tool.call.result")
)

// Tracer is agentd's tracer: the global provider's, a no-op one until
// Setup installs an exporter.
func Tracer() trace.Tracer { return otel.Tracer(Name) }

// on is set once Setup installed an exporter.
var on atomic.Bool

// On reports whether spans are exported: callers skip building spans
// (and their attributes) when they are not.
func On() bool { return on.Load() }

// Endpoint is the URL spans are sent to, from the standard variables:
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT as it is, or OTEL_EXPORTER_OTLP_ENDPOINT
// with /v1/traces; "" (tracing off) without either, or when
// OTEL_SDK_DISABLED is true or OTEL_TRACES_EXPORTER is none.
func Endpoint(getenv func(string) string) string {
	if strings.EqualFold(getenv("OTEL_SDK_DISABLED"), "true") || strings.EqualFold(getenv("OTEL_TRACES_EXPORTER"), "none") {
		return ""
	}
	if ep := getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"); ep != "" {
		return ep
	}
	if ep := getenv("OTEL_EXPORTER_OTLP_ENDPOINT"); ep != "" {
		return strings.TrimSuffix(ep, "/") + "/v1/traces"
	}
	return ""
}

// Setup installs the W3C trace context propagator and, when Endpoint says
// so, a tracer provider that batches spans to it over OTLP HTTP (headers,
// timeout and compression as the OTEL_* variables of the process say),
// under the service name OTEL_SERVICE_NAME (default agentd). shutdown
// flushes what is pending; it is a no-op when tracing is off.
func Setup(ctx context.Context, getenv func(string) string) (shutdown func(context.Context) error, err error) {
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	endpoint := Endpoint(getenv)
	if endpoint == "" {
		return func(context.Context) error { return nil }, nil
	}
	exp, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(endpoint))
	if err != nil {
		return nil, err
	}
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(attribute.String("service.name", serviceName(getenv))))
	if err != nil && !errors.Is(err, resource.ErrSchemaURLConflict) {
		return nil, err
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp, sdktrace.WithBatchTimeout(batchTimeout(getenv))), sdktrace.WithResource(res))
	otel.SetTracerProvider(tp)
	on.Store(true)
	return tp.Shutdown, nil
}

func serviceName(getenv func(string) string) string {
	if s := getenv("OTEL_SERVICE_NAME"); s != "" {
		return s
	}
	return "agentd"
}

// TraceParent is the W3C traceparent of ctx's span ("" when there is
// none), to keep with a run so that its executions join the trace.
func TraceParent(ctx context.Context) string {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return ""
	}
	c := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, c)
	return c["traceparent"]
}

// WithTraceParent returns ctx with the remote span context of traceparent
// as its parent ("" or an invalid one: ctx as it is).
func WithTraceParent(ctx context.Context, traceparent string) context.Context {
	if traceparent == "" {
		return ctx
	}
	return propagation.TraceContext{}.Extract(ctx, propagation.MapCarrier{"traceparent": traceparent})
}

// batchTimeout is OTEL_BSP_SCHEDULE_DELAY (milliseconds), default 5 s.
func batchTimeout(getenv func(string) string) time.Duration {
	if ms, err := strconv.Atoi(getenv("OTEL_BSP_SCHEDULE_DELAY")); err == nil && ms > 0 {
		return time.Duration(ms) * time.Millisecond
	}
	return 5 * time.Second
}
