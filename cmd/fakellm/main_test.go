package main

import (
	"bytes"
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"
)

// syncBuffer is a bytes.Buffer safe for the server's and the test's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestRunStartsAndStops(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	var out syncBuffer
	errc := make(chan error, 1)
	getenv := func(k string) string {
		if k == "FAKELLM_ADDR" {
			return "127.0.0.1:0"
		}
		return ""
	}
	go func() { errc <- run(ctx, nil, getenv, &out) }()

	deadline := time.Now().Add(5 * time.Second)
	for !bytes.Contains([]byte(out.String()), []byte("fakellm listening")) {
		if time.Now().After(deadline) {
			t.Fatalf("no start log line; output %q", out.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	var line struct {
		Msg  string `json:"msg"`
		Addr string `json:"addr"`
	}
	first, _, _ := bytes.Cut([]byte(out.String()), []byte("\n"))
	if err := json.Unmarshal(first, &line); err != nil || line.Addr == "" || line.Addr == "127.0.0.1:0" {
		t.Fatalf("start line %q: %v", first, err)
	}
	cancel()
	select {
	case err := <-errc:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("run did not return after cancel")
	}
}
