package tools

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/agentd/agentd"
)

func TestOffload(t *testing.T) {
	t.Parallel()
	small := json.RawMessage(`{"a":1}`)
	if got, a := Offload(small, 100, "x"); string(got) != string(small) || a != nil {
		t.Fatalf("a result under the limit changed: %s %v", got, a)
	}
	if got, a := Offload(json.RawMessage(strings.Repeat(" ", DefaultMaxResultBytes)), 0, "x"); a != nil || len(got) != DefaultMaxResultBytes {
		t.Fatalf("limit 0 is not the default: %d bytes, artifact %v", len(got), a != nil)
	}
	text := strings.Repeat("é€😀<&>", 2000)
	quoted, _ := json.Marshal(text)
	object := json.RawMessage(`{"rows":["` + strings.Repeat("abc", 3000) + `"]}`)
	for _, c := range []struct {
		name    string
		result  json.RawMessage
		media   string
		content []byte
	}{
		{"string", quoted, "text/plain; charset=utf-8", []byte(text)},
		{"object", object, "application/json", object},
	} {
		got, a := Offload(c.result, 1000, "art-1")
		if a == nil {
			t.Fatalf("%s: %d bytes over a limit of 1000 were not offloaded", c.name, len(c.result))
		}
		sum := sha256.Sum256(c.content)
		if a.ID != "art-1" || a.MediaType != c.media || !bytes.Equal(a.Content, c.content) || a.SHA256 != hex.EncodeToString(sum[:]) {
			t.Fatalf("%s: artifact %s %s %d bytes %s", c.name, a.ID, a.MediaType, a.Size(), a.SHA256)
		}
		var p preview
		if err := json.Unmarshal(got, &p); err != nil {
			t.Fatalf("%s: preview is not JSON: %v", c.name, err)
		}
		if p.ArtifactID != "art-1" || p.Bytes != len(c.content) || p.MediaType != c.media || p.SHA256 != a.SHA256 {
			t.Fatalf("%s: preview %+v", c.name, p)
		}
		if len(p.Preview) > PreviewBytes || len(p.Preview) < PreviewBytes-utf8.UTFMax || !bytes.HasPrefix(c.content, []byte(p.Preview)) {
			t.Fatalf("%s: preview of %d bytes is not the start of the content", c.name, len(p.Preview))
		}
		if !strings.Contains(p.Note, `"id": "art-1"`) || !strings.Contains(p.Note, ReadArtifactName) {
			t.Fatalf("%s: the note does not say how to read on: %s", c.name, p.Note)
		}
		if len(got) > 4*PreviewBytes {
			t.Fatalf("%s: what the model sees is %d bytes", c.name, len(got))
		}
	}
}

// memArtifacts is an ArtifactReader over one artifact, as the database's
// substring() reads it.
type memArtifacts struct {
	id      string
	content []byte
}

func (m memArtifacts) ArtifactRead(_ context.Context, _ string, id string, offset, length int64) (agentd.ArtifactPage, error) {
	if id != m.id {
		return agentd.ArtifactPage{}, agentd.ErrArtifactNotFound
	}
	from := min(offset, int64(len(m.content)))
	to := min(from+length, int64(len(m.content)))
	return agentd.ArtifactPage{Content: m.content[from:to], Size: int64(len(m.content)), MediaType: "text/plain"}, nil
}

type page struct {
	Offset     int64  `json:"offset"`
	Length     int    `json:"length"`
	Bytes      int64  `json:"bytes"`
	Content    string `json:"content"`
	NextOffset int64  `json:"next_offset"`
	EOF        bool   `json:"eof"`
}

func read(t *testing.T, tool Tool, args string) (page, error) {
	t.Helper()
	out, err := tool.Invoke(context.Background(), Call{RunID: "r", Arguments: json.RawMessage(args)})
	if err != nil {
		return page{}, err
	}
	var p page
	if err := json.Unmarshal(out, &p); err != nil {
		t.Fatalf("%s: %s is not a page: %v", args, out, err)
	}
	return p, nil
}

// TestReadArtifactPages: paging with any length, from any offset, gives
// whole characters that join up to the artifact, and ends.
func TestReadArtifactPages(t *testing.T) {
	t.Parallel()
	content := []byte(strings.Repeat("aé€😀", 3000))
	tool := ReadArtifact(memArtifacts{id: "a1", content: content})
	for _, length := range []int{1, 2, 3, 5, 100, 4097, 65536, 1 << 20} {
		var got []byte
		offset := int64(0)
		for n := 0; ; n++ {
			if n > len(content) {
				t.Fatalf("length %d: paging does not end", length)
			}
			p, err := read(t, tool, `{"id":"a1","offset":`+itoa(offset)+`,"length":`+itoa(int64(length))+`}`)
			if err != nil {
				t.Fatal(err)
			}
			if p.Offset != offset || p.Bytes != int64(len(content)) || !utf8.ValidString(p.Content) || p.Length != len(p.Content) {
				t.Fatalf("length %d at %d: page %+v", length, offset, p)
			}
			if p.Length > max(length, utf8.UTFMax) || p.Length > 64<<10 {
				t.Fatalf("length %d at %d: %d bytes", length, offset, p.Length)
			}
			got = append(got, p.Content...)
			if p.EOF {
				break
			}
			if p.NextOffset <= offset {
				t.Fatalf("length %d at %d: next offset %d", length, offset, p.NextOffset)
			}
			offset = p.NextOffset
		}
		if !bytes.Equal(got, content) {
			t.Fatalf("length %d: pages join to %d bytes, want %d", length, len(got), len(content))
		}
	}
	// An offset inside a character starts at the next one.
	p, err := read(t, tool, `{"id":"a1","offset":2,"length":10}`)
	if err != nil || p.Offset != 3 || !strings.HasPrefix(p.Content, "€") {
		t.Fatalf("offset inside é: %+v %v", p, err)
	}
	if p, err := read(t, tool, `{"id":"a1","offset":999999}`); err != nil || !p.EOF || p.Content != "" || p.Offset != int64(len(content)) {
		t.Fatalf("offset past the end: %+v %v", p, err)
	}
	for _, bad := range []string{`{"id":"nope"}`, `{"offset":1}`, `{"id":"a1","offset":-1}`, `[1]`} {
		_, err := read(t, tool, bad)
		if e, ok := errors.AsType[*Error](err); !ok || e.Kind != KindFinal {
			t.Fatalf("%s: %v, want a final error", bad, err)
		}
	}
}

func itoa(n int64) string { b, _ := json.Marshal(n); return string(b) }
