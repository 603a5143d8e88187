package tools

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/agentd/agentd"
)

func TestDecide(t *testing.T) {
	t.Parallel()
	final := &Error{Kind: KindFinal}
	transient := &Error{Kind: KindTransient}
	timeout := &Error{Kind: KindTimeout}
	conn := &Error{Kind: KindConnection}
	plain := errors.New("boom")
	wrapped := fmt.Errorf("call: %w", timeout)
	deadline := fmt.Errorf("x: %w", context.DeadlineExceeded)

	ro := Spec{Effect: agentd.EffectReadOnly}
	idem := Spec{Effect: agentd.EffectIdempotent}
	side := Spec{Effect: agentd.EffectSideEffect}
	side5 := Spec{Effect: agentd.EffectSideEffect, MaxAttempts: 5}
	ro5 := Spec{Effect: agentd.EffectReadOnly, MaxAttempts: 5}

	tests := []struct {
		spec    Spec
		err     error
		attempt int
		want    Decision
	}{
		{ro, final, 1, Fail},
		{idem, final, 1, Fail},
		{side, final, 1, Fail},

		{ro, transient, 1, Retry},
		{ro, transient, 2, Retry},
		{ro, transient, 3, Fail},
		{idem, transient, 2, Retry},
		{idem, transient, 3, Fail},
		{ro5, transient, 4, Retry},
		{ro5, transient, 5, Fail},
		{side, transient, 1, Fail},
		{side5, transient, 1, Fail},

		{ro, timeout, 1, Retry},
		{ro, timeout, 3, Fail},
		{idem, conn, 2, Retry},
		{idem, conn, 3, Fail},
		{side, timeout, 1, Unknown},
		{side, conn, 1, Unknown},
		{side5, conn, 1, Unknown},

		{ro, plain, 1, Retry},
		{ro, plain, 3, Fail},
		{side, plain, 1, Fail},
		{side, wrapped, 1, Unknown},
		{side, deadline, 1, Unknown},
		{idem, wrapped, 1, Retry},
	}
	for _, tt := range tests {
		if got := Decide(tt.spec, tt.err, tt.attempt); got != tt.want {
			t.Errorf("Decide(%s max=%d, %v, %d) = %s, want %s", tt.spec.Effect, tt.spec.MaxAttempts, tt.err, tt.attempt, got, tt.want)
		}
	}
}

func TestSpecDefaults(t *testing.T) {
	t.Parallel()
	if got := (Spec{Effect: agentd.EffectReadOnly}).Attempts(); got != 3 {
		t.Errorf("read_only Attempts = %d", got)
	}
	if got := (Spec{Effect: agentd.EffectSideEffect}).Attempts(); got != 1 {
		t.Errorf("side_effect Attempts = %d", got)
	}
	if got := (Spec{Effect: agentd.EffectIdempotent, MaxAttempts: 7}).Attempts(); got != 7 {
		t.Errorf("Attempts with MaxAttempts = %d", got)
	}
	s := Spec{}
	for attempt, want := range map[int]time.Duration{0: 200 * time.Millisecond, 1: 200 * time.Millisecond, 2: 400 * time.Millisecond, 3: 800 * time.Millisecond, 6: 5 * time.Second, 100: 5 * time.Second} {
		if got := s.BackoffFor(attempt); got != want {
			t.Errorf("BackoffFor(%d) = %v, want %v", attempt, got, want)
		}
	}
	if got := (Spec{Backoff: time.Second}).BackoffFor(2); got != 2*time.Second {
		t.Errorf("BackoffFor(2) with 1s = %v", got)
	}
	if got := s.ResultLimit(); got != 16<<10 {
		t.Errorf("ResultLimit = %d", got)
	}
	if got := (Spec{MaxResultBytes: 10}).ResultLimit(); got != 10 {
		t.Errorf("ResultLimit = %d", got)
	}
	if got := s.AttemptTimeout(time.Minute); got != time.Minute {
		t.Errorf("AttemptTimeout = %v", got)
	}
	if got := (Spec{Timeout: time.Second}).AttemptTimeout(time.Minute); got != time.Second {
		t.Errorf("AttemptTimeout = %v", got)
	}
}
