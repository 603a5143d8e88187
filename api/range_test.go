package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"strings"
	"testing"
)

// artifactOf keeps content (JSON over the default result limit) as an
// artifact, as a client's result to a waiting run, and returns its path.
func artifactOf(t *testing.T, b *bundle, content string) string {
	t.Helper()
	runID, callID := waitingRun(t, b)
	want[runBody](t, b.do("POST", "/runs/"+runID+"/actions",
		`{"tool_call_id":"`+callID+`","decision":"result","result":`+content+`}`), http.StatusOK)
	steps, err := b.store.StepsList(context.Background(), runID)
	if err != nil {
		t.Fatal(err)
	}
	var pv struct {
		ArtifactID string `json:"artifact_id"`
		Bytes      int    `json:"bytes"`
	}
	if err := json.Unmarshal(steps[0].Calls[0].Result, &pv); err != nil || pv.Bytes != len(content) {
		t.Fatalf("the result was not kept as an artifact: %s", steps[0].Calls[0].Result)
	}
	return "/runs/" + runID + "/artifacts/" + pv.ArtifactID
}

// spaced is a Range header of n ranges of length bytes each, every step
// bytes from the one before.
func spaced(n, length, step int) string {
	specs := make([]string, n)
	for i := range specs {
		specs[i] = fmt.Sprintf("%d-%d", i*step, i*step+length-1)
	}
	return "bytes=" + strings.Join(specs, ",")
}

// TestArtifactRanges: a Range on an artifact is answered as RFC 9110 says
// and within the bounds common servers keep: no satisfiable range (bytes=-0
// included) is 416 with Content-Range bytes */size; overlapping and
// adjacent ranges are merged; more than 100 ranges, or ranges whose
// multipart answer would be no smaller than the artifact, get the artifact
// whole; a unit other than bytes is ignored; preconditions come first.
func TestArtifactRanges(t *testing.T) {
	t.Parallel()
	b := setup(t)
	content := `{"blob":"` + strings.Repeat("0123456789", 4000)[:39997] + `"}`
	if len(content) != 40008 {
		t.Fatalf("content of %d bytes", len(content))
	}
	path := artifactOf(t, b, content)
	etag := b.do("GET", path, "").header.Get("ETag")
	for _, c := range []struct {
		name, rangeHeader string
		headers           []string
		status            int
		contentRange      string // of a 206 of one part, or of a 416
		body              string // of a 206 of one part
	}{
		{"a suffix of zero bytes", "bytes=-0", nil, 416, "bytes */40008", ""},
		{"a start past the end", "bytes=40008-", nil, 416, "bytes */40008", ""},
		{"a malformed range", "bytes=5-1", nil, 416, "bytes */40008", ""},
		{"a zero suffix beside a range", "bytes=-0, 0-4", nil, 206, "bytes 0-4/40008", content[:5]},
		{"one range", "bytes=9-13", nil, 206, "bytes 9-13/40008", content[9:14]},
		{"overlapping ranges", "bytes=0-9,5-19", nil, 206, "bytes 0-19/40008", content[:20]},
		{"adjacent ranges, out of order", "bytes=10-19,0-9", nil, 206, "bytes 0-19/40008", content[:20]},
		{"a suffix past the size", "bytes=-50000", nil, 206, "bytes 0-40007/40008", content},
		{"2,000 one-byte ranges", spaced(2000, 1, 2), nil, 200, "", ""},
		{"2,000 adjacent one-byte ranges", spaced(2000, 1, 1), nil, 200, "", ""},
		{"ranges whose parts outweigh the artifact", spaced(100, 300, 400), nil, 200, "", ""},
		{"another unit", "items=0-1", nil, 200, "", ""},
		{"an If-None-Match that matches", "bytes=-0", []string{"If-None-Match", etag}, 304, "", ""},
		{"an If-Range of another version", "bytes=-0", []string{"If-Range", `"other"`}, 200, "", ""},
	} {
		r := b.do("GET", path, "", append([]string{"Range", c.rangeHeader}, c.headers...)...)
		if r.status != c.status {
			t.Errorf("%s: %d %s (%d bytes), want %d", c.name, r.status, r.header.Get("Content-Range"), len(r.body), c.status)
			continue
		}
		switch c.status {
		case 416:
			wantProblem(t, r, 416, "range_not_satisfiable")
			if got := r.header.Get("Content-Range"); got != c.contentRange {
				t.Errorf("%s: Content-Range %q, want %q", c.name, got, c.contentRange)
			}
		case 206:
			if got := r.header.Get("Content-Range"); got != c.contentRange || string(r.body) != c.body {
				t.Errorf("%s: Content-Range %q and %d bytes, want %q", c.name, got, len(r.body), c.contentRange)
			}
		case 200:
			if string(r.body) != content || r.header.Get("Content-Range") != "" {
				t.Errorf("%s: %d bytes, Content-Range %q: want the artifact whole", c.name, len(r.body), r.header.Get("Content-Range"))
			}
		}
	}
	// Ranges that stay apart come as parts, in the order asked.
	r := b.do("GET", path, "", "Range", "bytes=100-104, 0-4, 2-3")
	if r.status != http.StatusPartialContent || len(r.body) >= len(content) {
		t.Fatalf("two ranges: %d, %d bytes", r.status, len(r.body))
	}
	if got := parts(t, r); len(got) != 2 || got[0] != "bytes 100-104/40008 "+content[100:105] || got[1] != "bytes 0-4/40008 "+content[:5] {
		t.Fatalf("two ranges: parts %q", got)
	}
}

// parts reads a multipart/byteranges answer: each part's Content-Range
// and content.
func parts(t *testing.T, r response) []string {
	t.Helper()
	mt, params, err := mime.ParseMediaType(r.header.Get("Content-Type"))
	if err != nil || mt != "multipart/byteranges" {
		t.Fatalf("Content-Type %q: %v", r.header.Get("Content-Type"), err)
	}
	mr := multipart.NewReader(strings.NewReader(string(r.body)), params["boundary"])
	var out []string
	for {
		p, err := mr.NextPart()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(p)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, p.Header.Get("Content-Range")+" "+string(data))
	}
}
