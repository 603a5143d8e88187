package persist

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Listen holds one connection that LISTENs on channels and calls fn for each
// notification, reconnecting with backoff when the connection drops (a
// restart, a failover: to the writable host of a multi-host URL), until
// ctx ends. onConnect, when set, is called after each (re)connection, so
// that the caller can catch up on anything it may have missed. It returns
// ctx's error.
func (s *Store) Listen(ctx context.Context, channels []string, onConnect func(), fn func(channel, payload string)) error {
	const first = 100 * time.Millisecond
	backoff := first
	for {
		connected := false
		err := s.listenOnce(ctx, channels, func() {
			connected = true
			if onConnect != nil {
				onConnect()
			}
		}, fn)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		// The caller learns of gaps through onConnect; the slow poll covers
		// the rest. A failure to connect tells the store's health.
		s.health.failed(err)
		if connected {
			backoff = first // a connection that worked: the next try is quick
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 5*time.Second)
	}
}

func (s *Store) listenOnce(ctx context.Context, channels []string, onConnect func(), fn func(channel, payload string)) error {
	conn, err := pgx.ConnectConfig(ctx, s.listen)
	if err != nil {
		return fmt.Errorf("listen connect: %w", err)
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		_ = conn.Close(cctx)
	}()
	for _, ch := range channels {
		if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{ch}.Sanitize()); err != nil {
			return fmt.Errorf("listen %s: %w", ch, err)
		}
	}
	if onConnect != nil {
		onConnect()
	}
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
				return ctx.Err()
			}
			return fmt.Errorf("wait for notification: %w", err)
		}
		fn(n.Channel, n.Payload)
	}
}

// NotifyMany sends one notification per payload on channel, in one statement.
func (s *Store) NotifyMany(ctx context.Context, channel string, payloads []string) error {
	if len(payloads) == 0 {
		return nil
	}
	_, err := s.pool.Exec(ctx, `SELECT pg_notify($1, p) FROM unnest($2::text[]) AS p`, channel, payloads)
	return translate(err)
}
