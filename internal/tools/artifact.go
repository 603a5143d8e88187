package tools

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"unicode/utf8"

	"github.com/agentd/agentd"
)

// Offload limits.
const (
	// PreviewBytes is how much of an offloaded result the model is shown.
	PreviewBytes = 2 << 10
	// MaxResultBytes is the most a tool may return: a webhook's larger
	// response is refused as a final error.
	MaxResultBytes = 4 << 20
	// ReadArtifactName is the built-in tool that pages through artifacts.
	ReadArtifactName = "read_artifact"
	// defaultReadBytes and maxReadBytes bound one read_artifact page.
	defaultReadBytes = 16 << 10
	maxReadBytes     = 64 << 10
)

// preview is what the model sees in place of an offloaded result.
type preview struct {
	ArtifactID string `json:"artifact_id"`
	MediaType  string `json:"media_type"`
	Bytes      int    `json:"bytes"`
	SHA256     string `json:"sha256"`
	Preview    string `json:"preview"`
	Note       string `json:"note"`
}

// Offload returns result unchanged when it is at most limit bytes (limit 0
// means DefaultMaxResultBytes). A larger result becomes an artifact with the
// given id, and what the model is shown is a preview object: the artifact's
// id, media type, size and sha256, its first PreviewBytes bytes, and a note
// that says how to read the rest with read_artifact. A result that is a JSON
// string is kept as its text; any other as its JSON.
func Offload(result json.RawMessage, limit int, id string) (json.RawMessage, *agentd.Artifact) {
	if limit <= 0 {
		limit = DefaultMaxResultBytes
	}
	if len(result) <= limit {
		return result, nil
	}
	a := &agentd.Artifact{ID: id, MediaType: "application/json", Content: result}
	var text string
	if result[0] == '"' && json.Unmarshal(result, &text) == nil {
		a.MediaType, a.Content = "text/plain; charset=utf-8", []byte(text)
	}
	sum := sha256.Sum256(a.Content)
	a.SHA256 = hex.EncodeToString(sum[:])
	head := validPrefix(a.Content[:min(len(a.Content), PreviewBytes)])
	p := preview{ArtifactID: id, MediaType: a.MediaType, Bytes: len(a.Content), SHA256: a.SHA256, Preview: head,
		Note: fmt.Sprintf("This result is %d bytes, too large to show whole: above are its first %d. "+
			`Read the rest with the %s tool, {"id": %q, "offset": %d, "length": %d}.`,
			len(a.Content), len(head), ReadArtifactName, id, len(head), defaultReadBytes)}
	out, _ := marshalNoEscape(p) // cannot fail: plain struct
	return out, a
}

// ArtifactReader reads artifacts for read_artifact: length bytes from
// offset of the artifact id, if the conversation of run runID holds it;
// agentd.ErrArtifactNotFound when it does not.
type ArtifactReader interface {
	ArtifactRead(ctx context.Context, runID, id string, offset, length int64) (agentd.ArtifactPage, error)
}

// ReadArtifact returns the read_only built-in tool "read_artifact", which
// pages through the artifacts of the calling run's conversation:
// {"id", "offset" (default 0), "length" (default 16 KiB, at most 64 KiB)}
// gives {"id", "offset", "length", "bytes" (the whole size), "content",
// "next_offset", "eof"}. Pages end on whole UTF-8 characters, so
// next_offset may be a little short of offset+length.
func ReadArtifact(r ArtifactReader) Tool { return readArtifact{r: r} }

type readArtifact struct{ r ArtifactReader }

var readArtifactSchema = json.RawMessage(`{
  "type": "object",
  "properties": {
    "id": {"type": "string", "description": "The artifact_id of an offloaded tool result."},
    "offset": {"type": "integer", "minimum": 0, "description": "Byte offset to read from; default 0."},
    "length": {"type": "integer", "minimum": 1, "maximum": 65536, "description": "Bytes to read; default 16384."}
  },
  "required": ["id"],
  "additionalProperties": false
}`)

func (readArtifact) Spec() Spec {
	return Spec{
		Name: ReadArtifactName,
		Description: "Read part of a tool result that was too large to show whole (an artifact), " +
			"by its artifact_id, from a byte offset.",
		Parameters: readArtifactSchema,
		Effect:     agentd.EffectReadOnly,
		// A page is at most 64 KiB of text: its JSON is never offloaded again.
		MaxResultBytes: 8 * maxReadBytes,
	}
}

func (t readArtifact) Invoke(ctx context.Context, call Call) (json.RawMessage, error) {
	var args struct {
		ID     string `json:"id"`
		Offset int64  `json:"offset"`
		Length int64  `json:"length"`
	}
	if err := json.Unmarshal(call.Arguments, &args); err != nil || args.ID == "" || args.Offset < 0 || args.Length < 0 {
		return nil, &Error{Kind: KindFinal, Message: `arguments must be {"id": string, "offset": integer >= 0, "length": integer >= 1}`, Err: err}
	}
	if args.Length == 0 {
		args.Length = defaultReadBytes
	}
	args.Length = min(args.Length, maxReadBytes)
	args.Offset = min(args.Offset, MaxResultBytes+1) // no artifact is larger
	// Read a few bytes more on each side, to end on whole characters.
	from := max(args.Offset-(utf8.UTFMax-1), 0)
	page, err := t.r.ArtifactRead(ctx, call.RunID, args.ID, from, args.Length+(args.Offset-from)+utf8.UTFMax)
	if errors.Is(err, agentd.ErrArtifactNotFound) {
		return nil, &Error{Kind: KindFinal, Message: fmt.Sprintf("no artifact %q in this conversation", args.ID), Err: err}
	}
	if err != nil {
		return nil, &Error{Kind: KindTransient, Message: "the artifact could not be read", Err: err}
	}
	start, content := textPage(page.Content, args.Offset-from, args.Length)
	offset := from + int64(start)
	if args.Offset >= page.Size {
		offset = page.Size
	}
	next := offset + int64(len(content))
	return marshalNoEscape(struct {
		ID         string `json:"id"`
		Offset     int64  `json:"offset"`
		Length     int    `json:"length"`
		Bytes      int64  `json:"bytes"`
		Content    string `json:"content"`
		NextOffset int64  `json:"next_offset"`
		EOF        bool   `json:"eof"`
	}{args.ID, offset, len(content), page.Size, string(content), next, next >= page.Size})
}

// textPage returns, from buf (read from before the wanted offset), the page
// that starts at the first character start at or after at and holds at most
// length bytes of whole characters; and where it starts in buf.
func textPage(buf []byte, at, length int64) (int, []byte) {
	start := int(min(at, int64(len(buf))))
	for start < len(buf) && !utf8.RuneStart(buf[start]) {
		start++
	}
	end := int(min(int64(start)+length, int64(len(buf))))
	// Cut back to the end of the last whole character; a page shorter than
	// one character holds that character.
	end = start + len(validPrefix(buf[start:end]))
	if end == start && start < len(buf) {
		_, size := utf8.DecodeRune(buf[start:])
		end = start + size
	}
	return start, buf[start:end]
}

func marshalNoEscape(v any) (json.RawMessage, error) {
	var buf bytes.Buffer
	e := json.NewEncoder(&buf)
	e.SetEscapeHTML(false) // the model reads plain JSON, not HTML
	if err := e.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimRight(buf.Bytes(), "\n"), nil
}
