// Package agentd is agentd's domain: the nouns that storage
// (internal/persist), the engine (internal/run), the HTTP transport (api)
// and the Go SDK (client) share, and the rules about them. It imports
// nothing of agentd's, so that every layer, and the SDK's users, can import
// it.
//
// The vocabulary (vocab.go, content.go): every state and choice of a run, a
// step, a tool call and an attempt is a type whose values are listed once
// (RunStatus, Reason, IfBusy, OnDisconnect, Effect, StepStatus, CallStatus,
// AttemptStatus, ActionType, Decision, ErrorKind, FinishReason), and a
// question such as "is this status terminal?" is a method, answered here.
// A message's content is a list of Parts; Usage counts tokens.
//
// The run and what hangs off it (run.go): Run with its RunParams,
// Conversation, Message, Step, ToolCall, Attempt, Artifact, Compaction,
// and RunState, the committed state the agent loop is rebuilt from.
//
// Events (event.go, payload.go): the type of every event a run's stream
// carries, one struct per type's data (each names its own type, so an
// event's type and its data cannot disagree), the constructors of the
// events that several paths emit alike (a step's start, a claim, a run's
// end), the stored Event and the one decoder of its envelope (Envelope,
// Envelope.Payload). The JSON of every payload lists its keys in
// alphabetical order, the order in which events have always been stored;
// api/openapi.yaml describes each, and a test checks every event the engine
// emits against it.
//
// Commands and errors (commands.go, errors.go): what a store and the engine
// are asked (ActionParams, RunListParams, ...), and the errors callers
// branch on with errors.Is and errors.As (ErrRunNotFound, *BusyError,
// *DecisionError, ...).
package agentd
