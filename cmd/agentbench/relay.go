package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/agentd/agentd/client/sse"
)

// The relay is the floor a durable stream is compared to: a bare Go HTTP
// server, in a child process of its own (this binary with -serve-relay),
// that answers each POST relayPath (its body the user message) by calling
// the fake model's chat completions, streaming, reading its SSE, decoding
// each chunk's delta and writing it to its client as an SSE event, flushed.
// It stores nothing, keeps no log, numbers no event and resumes nothing.

// relayPath is the relay's one route.
const relayPath = "/relay"

// relayDone is the type of the relay's last event, after the model's
// [DONE]: a stream without it was cut.
const relayDone = "done"

// relay is the -serve-relay child's handler: model is the fake model's
// chat completions URL.
type relay struct {
	model  string
	client *http.Client
}

// relayRequest is the chat completion request the relay makes: the client's
// text as the one user message.
type relayRequest struct {
	Model    string         `json:"model"`
	Stream   bool           `json:"stream"`
	Messages []relayMessage `json:"messages"`
}

type relayMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// relayChunk is what the relay reads of a streamed chunk: its deltas' text.
type relayChunk struct {
	Choices []struct {
		Delta struct {
			Content string `json:"content"`
		} `json:"delta"`
	} `json:"choices"`
}

// serveRelay is the -serve-relay child process: it relays the fake model at
// model (its base URL, ending in /v1) on a loopback port, whose address it
// prints, until its standard input closes.
func serveRelay(out io.Writer, model string) error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	h := &relay{model: strings.TrimSuffix(model, "/") + "/chat/completions",
		client: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1024}}}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln)
	fmt.Fprintf(out, "http://%s\n", ln.Addr())
	io.Copy(io.Discard, os.Stdin)
	return srv.Close()
}

func (rl *relay) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != relayPath {
		http.NotFound(w, r)
		return
	}
	input, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, "read the body", http.StatusBadRequest)
		return
	}
	body, _ := json.Marshal(relayRequest{Model: "fake", Stream: true,
		Messages: []relayMessage{{Role: "user", Content: string(input)}}})
	req, err := http.NewRequestWithContext(r.Context(), http.MethodPost, rl.model, bytes.NewReader(body))
	if err != nil {
		http.Error(w, "model request", http.StatusInternalServerError)
		return
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := rl.client.Do(req)
	if err != nil {
		http.Error(w, "model unreachable", http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		http.Error(w, fmt.Sprintf("model: status %d", resp.StatusCode), http.StatusBadGateway)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	rl.stream(w, resp.Body)
}

// stream relays the model's SSE body to w, an event per delta, each
// flushed, then the done event after the model's [DONE]. A cut or
// malformed model stream ends the client's without it.
func (rl *relay) stream(w http.ResponseWriter, model io.Reader) {
	rc := http.NewResponseController(w)
	sc := bufio.NewScanner(model)
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	var buf []byte
	for sc.Scan() {
		data, ok := bytes.CutPrefix(sc.Bytes(), []byte("data: "))
		if !ok {
			continue
		}
		if bytes.Equal(data, []byte("[DONE]")) {
			_, _ = io.WriteString(w, "event: "+relayDone+"\ndata: {}\n\n")
			_ = rc.Flush()
			return
		}
		var c relayChunk
		if json.Unmarshal(data, &c) != nil {
			return
		}
		for _, ch := range c.Choices {
			if ch.Delta.Content == "" {
				continue
			}
			buf = append(buf[:0], "event: delta\n"...)
			for line := range strings.SplitSeq(ch.Delta.Content, "\n") {
				buf = append(append(append(buf, "data: "...), line...), '\n')
			}
			buf = append(buf, '\n')
			if _, err := w.Write(buf); err != nil {
				return
			}
			if rc.Flush() != nil {
				return
			}
		}
	}
}

// relayRun makes one request of the relay at base and reads its stream to
// the done event; a stream that ends before it, or carries no delta, failed.
func relayRun(base, input string) error {
	resp, err := client.Post(base+relayPath, "text/plain", strings.NewReader(input))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("POST %s: %d", relayPath, resp.StatusCode)
	}
	r := sse.NewReader(resp.Body)
	deltas := 0
	for {
		ev, err := r.Next()
		if errors.Is(err, io.EOF) {
			return io.ErrUnexpectedEOF
		}
		if err != nil {
			return err
		}
		if ev.Type == relayDone {
			if deltas == 0 {
				return fmt.Errorf("POST %s: no delta", relayPath)
			}
			return nil
		}
		deltas++
	}
}
