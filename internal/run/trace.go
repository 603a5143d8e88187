package run

import (
	"context"
	"encoding/json"
	"errors"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/llm"
	"github.com/agentd/agentd/internal/telemetry"
	"github.com/agentd/agentd/internal/tools"
)

// agentSpan starts the invoke_agent span of an execution, in the trace of
// the request that created the run (on whichever instance executes it):
// an execution after a takeover is a span of its own in that trace,
// marked recovered.
func (x *execution) agentSpan(ctx context.Context) (context.Context, trace.Span) {
	if !telemetry.On() {
		return ctx, trace.SpanFromContext(ctx) // records nothing
	}
	ctx = telemetry.WithTraceParent(ctx, x.claim.Params.TraceParent)
	return telemetry.Tracer().Start(ctx, "invoke_agent agentd", trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithAttributes(telemetry.OperationName.String("invoke_agent"), telemetry.AgentName.String("agentd"),
			telemetry.ConversationID.String(x.claim.ConversationID), telemetry.RequestModel.String(x.claim.Model),
			telemetry.RunID.String(x.claim.ID), telemetry.Epoch.Int64(x.claim.Epoch),
			telemetry.Recovered.Bool(x.claim.Epoch > 1)))
}

// chatSpan starts the chat span of a model call of step.
func (x *execution) chatSpan(ctx context.Context, step int, req llm.Request) (context.Context, trace.Span) {
	if !telemetry.On() {
		return ctx, trace.SpanFromContext(ctx)
	}
	attrs := []attribute.KeyValue{telemetry.OperationName.String("chat"), telemetry.ProviderName.String(x.d.profiles.For(req.Model).Provider()),
		telemetry.RequestModel.String(req.Model), telemetry.RunID.String(x.claim.ID), telemetry.Step.Int(step)}
	if f := x.fellBack; f.seq == step && f.to == req.Model {
		// The step fell back to this model: from which, and why.
		attrs = append(attrs, attribute.String("agentd.fallback_from", f.from), attribute.String("agentd.fallback_reason", f.reason))
	}
	return telemetry.Tracer().Start(ctx, "chat "+req.Model, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs...))
}

// endChatSpan records a model call's outcome on its span and ends it;
// messages only when content is to be traced.
func endChatSpan(span trace.Span, req llm.Request, resp llm.Response, err error, content bool) {
	if !span.IsRecording() {
		return
	}
	if err != nil {
		failSpan(span, err)
	} else {
		span.SetAttributes(telemetry.ResponseModel.String(req.Model), telemetry.InputTokens.Int64(resp.Usage.InputTokens),
			telemetry.OutputTokens.Int64(resp.Usage.OutputTokens), telemetry.FinishReasons.StringSlice([]string{string(resp.FinishReason)}))
	}
	if content {
		if b, err := json.Marshal(req.Messages); err == nil {
			span.SetAttributes(telemetry.InputMessages.String(string(b)))
		}
		if err == nil {
			b, _ := json.Marshal(map[string]any{"text": resp.Text, "tool_calls": resp.ToolCalls})
			span.SetAttributes(telemetry.OutputMessages.String(string(b)))
		}
	}
	span.End()
}

// failSpan records err on span, with its error.type.
func failSpan(span trace.Span, err error) {
	span.RecordError(err)
	span.SetStatus(codes.Error, errorType(err))
	span.SetAttributes(attribute.String("error.type", errorType(err)))
}

// toolSpan starts the execute_tool span of an attempt of call c.
func (x *execution) toolSpan(ctx context.Context, step *agentd.Step, c *agentd.ToolCall, spec tools.Spec) (context.Context, trace.Span) {
	if !telemetry.On() {
		return ctx, trace.SpanFromContext(ctx)
	}
	ctx, span := telemetry.Tracer().Start(ctx, "execute_tool "+c.Name, trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithAttributes(telemetry.OperationName.String("execute_tool"), telemetry.ToolName.String(c.Name),
			telemetry.ToolCallID.String(c.CallID), telemetry.ToolType.String("function"), telemetry.RunID.String(x.claim.ID),
			telemetry.Step.Int(step.Seq), telemetry.Attempt.Int(c.Attempts), telemetry.Effect.String(string(spec.Effect))))
	if x.d.traceContent {
		span.SetAttributes(telemetry.ToolArguments.String(string(c.Arguments)))
	}
	return ctx, span
}

// endToolSpan records an attempt's outcome on its span and ends it.
func endToolSpan(span trace.Span, result json.RawMessage, err error, content bool) {
	if !span.IsRecording() {
		return
	}
	if err != nil {
		failSpan(span, err)
	} else if content {
		span.SetAttributes(telemetry.ToolResult.String(string(result)))
	}
	span.End()
}

// errorType is the kind of a model's or a tool's failure, for error.type.
func errorType(err error) string {
	if e, ok := errors.AsType[*llm.Error](err); ok {
		return string(e.Kind)
	}
	if e, ok := errors.AsType[*tools.Error](err); ok {
		return string(e.Kind)
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return "timeout"
	}
	return "error"
}
