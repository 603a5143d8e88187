package sse_test

import (
	"errors"
	"io"
	"slices"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/agentd/agentd/client/sse"
)

// readAll reads r to its end: the events, and the error that ended them.
func readAll(r *sse.Reader) ([]sse.Event, error) {
	var out []sse.Event
	for {
		ev, err := r.Next()
		if err != nil {
			return out, err
		}
		out = append(out, ev)
	}
}

func TestReader(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		in        string
		want      []sse.Event
		end       error
		retry     time.Duration // 0: none
		remainder string
	}{
		"agentd's stream": {
			in: "retry: 1000\n\nid: 1\nevent: run.created\ndata: {\"seq\":1}\n\n" +
				"event: heartbeat\ndata: {\"status\":\"running\"}\n\n" +
				"id: 2\nevent: run.completed\ndata: {\"seq\":2}\n\n",
			want: []sse.Event{{ID: "1", HasID: true, Type: "run.created", Data: `{"seq":1}`},
				{Type: "heartbeat", Data: `{"status":"running"}`},
				{ID: "2", HasID: true, Type: "run.completed", Data: `{"seq":2}`}},
			end: io.EOF, retry: time.Second,
		},
		"multi-line data": {
			in:   "data: a\ndata:\ndata: b\n\ndata\n\n",
			want: []sse.Event{{Data: "a\n\nb"}, {Data: ""}},
			end:  io.EOF,
		},
		"comments": {
			in:   ": hello\n\nid: 1\n: between fields\ndata: x\n:\n\n: at the end\n",
			want: []sse.Event{{ID: "1", HasID: true, Data: "x"}},
			end:  io.EOF,
		},
		"retry": {
			in:   "retry: 250\n\nretry: 1s\ndata: a\n\nretry: -5\nretry:\nretry: 99999999999999999999\n\n",
			want: []sse.Event{{Data: "a"}},
			end:  io.EOF, retry: 250 * time.Millisecond,
		},
		"no space after the colon": {
			in:   "id:7\nevent:x\ndata:{}\ndata:  two spaces\n\n",
			want: []sse.Event{{ID: "7", HasID: true, Type: "x", Data: "{}\n two spaces"}},
			end:  io.EOF,
		},
		"CRLF line ends": {
			in:   "id: 1\r\nevent: a\r\ndata: x\r\ndata: y\r\n\r\nid: 2\r\ndata: z\r\n\r\n",
			want: []sse.Event{{ID: "1", HasID: true, Type: "a", Data: "x\ny"}, {ID: "2", HasID: true, Data: "z"}},
			end:  io.EOF,
		},
		"CR line ends": {
			in:   "id: 1\rdata: x\r\rdata: y\r\n\n",
			want: []sse.Event{{ID: "1", HasID: true, Data: "x"}, {Data: "y"}},
			end:  io.EOF,
		},
		"a final event without its blank line": {
			in:   "id: 1\ndata: x\n\nid: 2\ndata: y\n",
			want: []sse.Event{{ID: "1", HasID: true, Data: "x"}},
			end:  io.ErrUnexpectedEOF,
		},
		"a final line without its line end": {
			in:   "data: x\n\ndata: y",
			want: []sse.Event{{Data: "x"}},
			end:  io.ErrUnexpectedEOF,
		},
		"ids are the event's own": {
			in: "id: 1\ndata: a\n\ndata: b\n\nid:\ndata: c\n\nid: x\x00y\ndata: d\n\n",
			want: []sse.Event{{ID: "1", HasID: true, Data: "a"}, {Data: "b"}, {HasID: true, Data: "c"},
				{Data: "d"}},
			end: io.EOF,
		},
		"a block without data is no event": {
			in:   "id: 1\nevent: x\n\ndata: y\n\n",
			want: []sse.Event{{Data: "y"}},
			end:  io.EOF,
		},
		"unknown fields and byte order marks": {
			// Only the stream's first BOM is dropped: a later one starts
			// a field name that is no field.
			in:   "\uFEFFdata: a\nfoo: bar\nevent\n\n\uFEFFdata: b\n\n",
			want: []sse.Event{{Data: "a"}},
			end:  io.EOF,
		},
		"an oversized line": {
			in:   "data: x\n\ndata: " + strings.Repeat("y", 100) + "\n\n",
			want: []sse.Event{{Data: "x"}},
			end:  sse.ErrTooLarge,
		},
		"oversized data": {
			in:   "data: x\n\n" + strings.Repeat("data: "+strings.Repeat("y", 40)+"\n", 3) + "\n",
			want: []sse.Event{{Data: "x"}},
			end:  sse.ErrTooLarge,
		},
	} {
		for _, oneByte := range []bool{false, true} {
			var in io.Reader = strings.NewReader(tc.in)
			if oneByte {
				in = iotest.OneByteReader(in)
			}
			r := sse.NewReaderSize(in, 64)
			got, err := readAll(r)
			if !slices.Equal(got, tc.want) || !errors.Is(err, tc.end) {
				t.Errorf("%s (one byte at a time: %v): %+v, %v\nwant %+v, %v", name, oneByte, got, err, tc.want, tc.end)
			}
			if d, ok := r.Retry(); d != tc.retry || ok != (tc.retry > 0) {
				t.Errorf("%s: retry %v %v, want %v", name, d, ok, tc.retry)
			}
			if _, again := r.Next(); again != err {
				t.Errorf("%s: Next after %v: %v", name, err, again)
			}
		}
	}
}

// TestReaderLimit: a line of exactly the limit reads, one byte more does
// not; the default limit takes a 16 MiB line.
func TestReaderLimit(t *testing.T) {
	t.Parallel()
	const max = 1000
	at := "data:" + strings.Repeat("x", max-5)
	if got, err := readAll(sse.NewReaderSize(strings.NewReader(at+"\r\n\r\n"), max)); err != io.EOF || len(got) != 1 || len(got[0].Data) != max-5 {
		t.Errorf("a line of the limit: %d events, %v", len(got), err)
	}
	if got, err := readAll(sse.NewReaderSize(strings.NewReader(at+"x\n\n"), max)); !errors.Is(err, sse.ErrTooLarge) || len(got) != 0 {
		t.Errorf("a line over the limit: %d events, %v", len(got), err)
	}
	big := strings.Repeat("z", 16<<20-len("data: "))
	got, err := readAll(sse.NewReader(strings.NewReader("id: 1\nevent: tool_call.completed\ndata: " + big + "\r\n\r\n")))
	if err != io.EOF || len(got) != 1 || got[0].Data != big {
		t.Errorf("a 16 MiB data line: %d events, %v", len(got), err)
	}
}

// TestReaderDoesNotWaitPastCR: an event whose blank line ends with a lone
// CR is returned at once, before the next byte arrives (which may be a
// heartbeat away on a live stream).
func TestReaderDoesNotWaitPastCR(t *testing.T) {
	t.Parallel()
	pr, pw := io.Pipe()
	defer pr.Close()
	go func() { _, _ = io.WriteString(pw, "id: 1\rdata: x\r\r") }()
	got := make(chan sse.Event, 1)
	go func() {
		ev, _ := sse.NewReader(pr).Next()
		got <- ev
	}()
	select {
	case ev := <-got:
		if ev != (sse.Event{ID: "1", HasID: true, Data: "x"}) {
			t.Errorf("event %+v", ev)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the event ending with CR CR was not returned")
	}
	pw.Close()
}

// TestReaderError: a read error ends the stream as it is.
func TestReaderError(t *testing.T) {
	t.Parallel()
	boom := errors.New("connection reset")
	r := sse.NewReader(io.MultiReader(strings.NewReader("data: a\n\ndata: b\n"), iotest.ErrReader(boom)))
	got, err := readAll(r)
	if !errors.Is(err, boom) || !slices.Equal(got, []sse.Event{{Data: "a"}}) {
		t.Errorf("%+v, %v", got, err)
	}
}
