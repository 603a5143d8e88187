package compact

import (
	"fmt"
	"strings"

	"github.com/agentd/agentd"
)

// ImageTokens is what the context budget counts an image as, whatever its
// size and detail: about what the largest image costs at OpenAI's high
// detail and at Anthropic's (whose images cost up to about 1,600 tokens).
// A provider's count is its own; once a model call reported its prompt
// tokens, the budget goes by that count (see internal/run).
const ImageTokens = 1600

// AttachedBytes is what an image or a file (image true for an image) of
// mediaType and size bytes counts for, in the bytes that EstimateTokens
// turns into tokens (4 a token), as the built-in fakes count it too
// (internal/llm/fakellm/doc.go): an image 4*ImageTokens (ImageTokens
// tokens); a PDF a quarter of its bytes (a token per 16 bytes), and at
// least as much as an image (a page is a picture too); a text file its
// bytes, as text.
func AttachedBytes(image bool, mediaType string, size int) int {
	switch {
	case image:
		return 4 * ImageTokens
	case mediaType == "application/pdf":
		return max(4*ImageTokens, size/4)
	}
	return size
}

// attachedName names an image or a file in a compaction's transcript.
func attachedName(p agentd.Part) string {
	var b strings.Builder
	if p.Type == agentd.PartFile {
		b.WriteString("a file")
	} else {
		b.WriteString("an image")
	}
	if p.Filename != "" {
		fmt.Fprintf(&b, " %q", p.Filename)
	}
	switch {
	case p.URL != "":
		fmt.Fprintf(&b, " (%s)", p.URL)
	case p.MediaType != "":
		fmt.Fprintf(&b, " (%s, %d bytes)", p.MediaType, p.Size)
	}
	return b.String()
}
