-- +goose Up
CREATE TABLE conversations (
    id          uuid PRIMARY KEY,
    tenant_id   text NOT NULL,
    title       text NOT NULL DEFAULT '',
    metadata    jsonb NOT NULL DEFAULT '{}',
    next_seq    integer NOT NULL DEFAULT 1,
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX conversations_tenant ON conversations (tenant_id, id);

CREATE TABLE runs (
    id                  uuid PRIMARY KEY,
    tenant_id           text NOT NULL,
    conversation_id     uuid NOT NULL REFERENCES conversations (id),
    status              text NOT NULL CHECK (status IN ('queued', 'running', 'requires_action', 'interrupted',
                                                         'completed', 'failed', 'cancelled', 'timed_out')),
    terminal_reason     text CHECK (terminal_reason IN ('completed', 'max_steps', 'cancelled', 'timed_out_total',
                                                         'timed_out_step', 'model_error', 'tool_error',
                                                         'context_overflow', 'interrupted')),
    model               text NOT NULL,
    params              jsonb NOT NULL,
    idempotency_key     text,
    request_hash        text,
    epoch               bigint NOT NULL DEFAULT 0,
    lease_owner         text,
    lease_expires_at    timestamptz,
    deadline_at         timestamptz,
    cancel_requested_at timestamptz,
    required_action     jsonb,
    last_event_seq      bigint NOT NULL DEFAULT 0,
    step_count          integer NOT NULL DEFAULT 0,
    input_tokens        bigint NOT NULL DEFAULT 0,
    output_tokens       bigint NOT NULL DEFAULT 0,
    cached_input_tokens bigint NOT NULL DEFAULT 0,
    reasoning_tokens    bigint NOT NULL DEFAULT 0,
    error               jsonb,
    created_at          timestamptz NOT NULL DEFAULT now(),
    started_at          timestamptz,
    finished_at         timestamptz,
    updated_at          timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT runs_idempotency UNIQUE (tenant_id, idempotency_key)
);
-- Claimable runs: queued ones, and running ones whose lease may have expired.
CREATE INDEX runs_claimable ON runs (created_at) WHERE status IN ('queued', 'running');
-- One run executing (or waiting on a client) per conversation at a time.
CREATE UNIQUE INDEX runs_one_active_per_conversation ON runs (conversation_id)
    WHERE status IN ('running', 'requires_action');
CREATE INDEX runs_conversation ON runs (conversation_id, id);
CREATE INDEX runs_tenant ON runs (tenant_id, id);

CREATE TABLE messages (
    id              uuid PRIMARY KEY,
    conversation_id uuid NOT NULL REFERENCES conversations (id),
    run_id          uuid REFERENCES runs (id),
    seq             integer NOT NULL,
    role            text NOT NULL CHECK (role IN ('system', 'user', 'assistant', 'tool')),
    content         jsonb NOT NULL,
    status          text NOT NULL CHECK (status IN ('pending', 'partial', 'completed', 'failed', 'aborted')),
    created_at      timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT messages_conversation_seq UNIQUE (conversation_id, seq)
);
CREATE INDEX messages_run ON messages (run_id);

CREATE TABLE steps (
    id                  uuid PRIMARY KEY,
    run_id              uuid NOT NULL REFERENCES runs (id),
    seq                 integer NOT NULL,
    status              text NOT NULL CHECK (status IN ('running', 'acting', 'completed', 'failed', 'aborted')),
    finish_reason       text,
    transition          text,
    model_attempts      integer NOT NULL DEFAULT 0,
    input_tokens        bigint NOT NULL DEFAULT 0,
    output_tokens       bigint NOT NULL DEFAULT 0,
    cached_input_tokens bigint NOT NULL DEFAULT 0,
    reasoning_tokens    bigint NOT NULL DEFAULT 0,
    error               jsonb,
    started_at          timestamptz NOT NULL DEFAULT now(),
    finished_at         timestamptz,
    CONSTRAINT steps_run_seq UNIQUE (run_id, seq)
);

CREATE TABLE tool_calls (
    id              uuid PRIMARY KEY,
    run_id          uuid NOT NULL REFERENCES runs (id),
    step_id         uuid NOT NULL REFERENCES steps (id),
    position        integer NOT NULL,
    call_id         text NOT NULL,
    name            text NOT NULL,
    arguments       jsonb NOT NULL,
    idempotency_key text NOT NULL,
    effect          text NOT NULL CHECK (effect IN ('read_only', 'idempotent', 'side_effect')),
    status          text NOT NULL CHECK (status IN ('planned', 'running', 'succeeded', 'failed', 'unknown',
                                                     'awaiting_approval', 'rejected')),
    result          jsonb,
    error           jsonb,
    attempts        integer NOT NULL DEFAULT 0,
    created_at      timestamptz NOT NULL DEFAULT now(),
    finished_at     timestamptz,
    CONSTRAINT tool_calls_idempotency_key UNIQUE (idempotency_key),
    CONSTRAINT tool_calls_step_position UNIQUE (step_id, position)
);
CREATE INDEX tool_calls_run ON tool_calls (run_id);

CREATE TABLE tool_attempts (
    id           uuid PRIMARY KEY,
    tool_call_id uuid NOT NULL REFERENCES tool_calls (id),
    n            integer NOT NULL,
    status       text NOT NULL CHECK (status IN ('running', 'succeeded', 'failed', 'timed_out', 'unknown')),
    error        jsonb,
    worker       text NOT NULL,
    epoch        bigint NOT NULL,
    started_at   timestamptz NOT NULL DEFAULT now(),
    finished_at  timestamptz,
    CONSTRAINT tool_attempts_call_n UNIQUE (tool_call_id, n)
);
-- At most one attempt of a call may be running: no new attempt starts while an earlier one may still run.
CREATE UNIQUE INDEX tool_attempts_one_running ON tool_attempts (tool_call_id) WHERE status = 'running';

-- data is json, not jsonb: json keeps the exact text, so a replayed event is byte-identical to the live one.
CREATE TABLE run_events (
    run_id     uuid NOT NULL REFERENCES runs (id),
    seq        bigint NOT NULL,
    type       text NOT NULL,
    data       json NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (run_id, seq)
);

-- +goose Down
DROP TABLE run_events;
DROP TABLE tool_attempts;
DROP TABLE tool_calls;
DROP TABLE steps;
DROP TABLE messages;
DROP TABLE runs;
DROP TABLE conversations;
