// Command fakellm runs the fake OpenAI-compatible Chat Completions server of
// package fakellm on its own, for local stacks, benchmarks and demos. The
// directives it understands are documented in internal/llm/fakellm.
//
// Usage:
//
//	fakellm [-addr host:port]
//
// The address defaults to $FAKELLM_ADDR, else 127.0.0.1:8090. Point agentd at
// it with OPENAI_BASE_URL=http://127.0.0.1:8090/v1 (any API key will do), or
// route some models to it in agentd's models file (AGENTD_MODELS_FILE), with
// "provider": "openai" and "base_url": "http://127.0.0.1:8090/v1".
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/agentd/agentd/internal/llm/fakellm"
)

// shutdownGrace bounds how long a stop waits for open responses.
const shutdownGrace = 5 * time.Second

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Getenv, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "fakellm:", err)
		os.Exit(1)
	}
}

// run serves until ctx ends, then shuts down gracefully.
func run(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) error {
	fs := flag.NewFlagSet("fakellm", flag.ContinueOnError)
	fs.SetOutput(stderr)
	defAddr := getenv("FAKELLM_ADDR")
	if defAddr == "" {
		defAddr = "127.0.0.1:8090"
	}
	addr := fs.String("addr", defAddr, "listen address (env FAKELLM_ADDR)")
	if err := fs.Parse(args); err != nil {
		return err
	}

	log := slog.New(slog.NewJSONHandler(stderr, nil))
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}

	// Requests share a base context that ends at shutdown, so that /stream
	// pauses and hanging faults stop instead of holding the shutdown up.
	baseCtx, cancelBase := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelBase()
	srv := &http.Server{
		Handler:           fakellm.New(fakellm.WithLogger(log), fakellm.WithMaxHistory(1000)),
		ReadHeaderTimeout: 10 * time.Second,
		BaseContext:       func(net.Listener) context.Context { return baseCtx },
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	log.InfoContext(ctx, "fakellm listening", "addr", ln.Addr().String())

	select {
	case err := <-errc:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	log.InfoContext(ctx, "fakellm shutting down", "cause", context.Cause(ctx).Error())
	cancelBase()
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownGrace)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		_ = srv.Close()
		return fmt.Errorf("shutdown: %w", err)
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve: %w", err)
	}
	return nil
}
