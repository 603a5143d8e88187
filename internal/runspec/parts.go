package runspec

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"unicode/utf8"
	"unsafe"

	"github.com/agentd/agentd"
)

// The media types a run's input takes: images that every provider agentd
// speaks to reads, and documents (PDF and plain text).
var (
	ImageMediaTypes = []string{"image/png", "image/jpeg", "image/gif", "image/webp"}
	FileMediaTypes  = []string{"application/pdf", "text/plain", "text/markdown", "text/csv"}
)

// Limits of an input's images and files beyond their bytes
// (Defaults.MaxInputFileBytes and MaxInputFilesBytes).
const (
	// DefaultMaxInputFileBytes is the default cap of one image or file:
	// 5 MiB, the largest image Anthropic's API takes.
	DefaultMaxInputFileBytes = 5 << 20
	// DefaultMaxInputFilesBytes is the default cap of all the images and
	// files of one run's input.
	DefaultMaxInputFilesBytes = 20 << 20
	// MaxImageURLBytes caps an image's http(s) URL.
	MaxImageURLBytes = 4096
	// MaxFilenameBytes caps a file's name.
	MaxFilenameBytes = 255
	// MaxInputParts caps the parts of one input message.
	MaxInputParts = 100
)

// ParseDataURL reads a data: URL (RFC 2397) that field holds: its media
// type, lowercased and without parameters, and its bytes, base64 (standard
// or URL alphabet, padded or not) or percent-encoded. A text's charset
// parameter, when given, must be utf-8 or us-ascii.
func ParseDataURL(field, s string) (mediaType string, data []byte, err error) {
	const shape = "must be a data URL: data:<media type>;base64,<data>"
	rest, ok := cutPrefixFold(s, "data:")
	if !ok {
		return "", nil, fieldError(field, shape)
	}
	meta, payload, ok := strings.Cut(rest, ",")
	if !ok {
		return "", nil, fieldError(field, "%s (it has no comma)", shape)
	}
	params := strings.Split(meta, ";")
	mediaType = strings.ToLower(strings.TrimSpace(params[0]))
	isBase64 := false
	for _, p := range params[1:] {
		p = strings.ToLower(strings.TrimSpace(p))
		switch {
		case p == "base64":
			isBase64 = true
		case strings.HasPrefix(p, "charset="):
			if cs := strings.Trim(strings.TrimPrefix(p, "charset="), `"`); cs != "utf-8" && cs != "us-ascii" {
				return "", nil, fieldError(field, "has charset %q: agentd takes text as UTF-8", cs)
			}
		}
	}
	if mediaType == "" || !strings.Contains(mediaType, "/") {
		return "", nil, fieldError(field, "%s (it names no media type)", shape)
	}
	if isBase64 {
		data, err = DecodeBase64(field, payload)
		return mediaType, data, err
	}
	text, uerr := url.PathUnescape(payload)
	if uerr != nil {
		return "", nil, fieldError(field, "is a data URL whose data is neither base64 nor percent-encoded")
	}
	return mediaType, []byte(text), nil
}

// DecodeBase64 reads the base64 data that field holds: the standard or
// the URL alphabet, padded or not.
func DecodeBase64(field, s string) ([]byte, error) {
	// s is decoded where it is, without the copy of DecodeString, into one
	// buffer that each encoding tried reuses: s may be tens of megabytes.
	src := unsafe.Slice(unsafe.StringData(s), len(s))             // only read
	dst := make([]byte, base64.RawStdEncoding.DecodedLen(len(s))) // the most of the four
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		if n, err := enc.Decode(dst, src); err == nil {
			return dst[:n:n], nil
		}
	}
	return nil, fieldError(field, "holds data that is not base64")
}

func cutPrefixFold(s, prefix string) (string, bool) {
	if len(s) < len(prefix) || !strings.EqualFold(s[:len(prefix)], prefix) {
		return s, false
	}
	return s[len(prefix):], true
}

// partsMessage checks the parts of input message m (name names its
// parts, see Request.PartField): at most MaxInputParts, images and files
// in a user message only, texts that can be stored, and something to say
// (a text that is not empty, or an image or a file).
func partsMessage(m agentd.InputMessage, name func(j int) string) error {
	if m.Content != "" {
		return fieldError(name(-1), "is either a text or a list of parts")
	}
	if len(m.Parts) > MaxInputParts {
		return fieldError(name(-1), "must hold at most %d parts, not %d", MaxInputParts, len(m.Parts))
	}
	said := false
	for j, p := range m.Parts {
		switch p.Type {
		case agentd.PartText:
			if err := Storable(name(j)+".text", p.Text); err != nil {
				return err
			}
			said = said || strings.TrimSpace(p.Text) != ""
		case agentd.PartImage, agentd.PartFile:
			if m.Role != agentd.RoleUser {
				return fieldError(name(j), "a %s message holds text only: images and files are a user's", m.Role)
			}
			said = true
		default:
			return fieldError(name(j)+".type", "must be text, image or file, not %q", p.Type)
		}
	}
	if !said {
		return fieldError(name(-1), "has nothing to say: a text that is not empty, an image or a file")
	}
	return nil
}

// attachments checks the messages of req's input given as parts
// (partsMessage), and their images and files: each one's kind, media
// type, bytes and size, their sum, and that each model of the run's chain
// (its model, then its fallbacks) takes them. Its errors name the part as
// req.PartField does.
func (b *Builder) attachments(req Request, models []string) error {
	var total int64
	for i, m := range req.Input {
		if len(m.Parts) == 0 {
			continue
		}
		name := func(j int) string {
			switch {
			case req.PartField != nil:
				return req.PartField(i, j)
			case j < 0:
				return fmt.Sprintf("input[%d].content", i)
			}
			return fmt.Sprintf("input[%d].content[%d]", i, j)
		}
		if err := partsMessage(m, name); err != nil {
			return err
		}
		for j, p := range m.Parts {
			if !p.Attached() {
				continue
			}
			if err := b.attachment(name(j), p); err != nil {
				return err
			}
			total += int64(len(p.Data))
			if total > b.d.MaxInputFilesBytes {
				return fieldError(name(j), "takes the input's images and files past %d bytes, the most one run may hold", b.d.MaxInputFilesBytes)
			}
			if err := b.accepted(name(j), p.Type, models); err != nil {
				return err
			}
		}
	}
	return nil
}

// attachment checks one image or file of an input.
func (b *Builder) attachment(field string, p agentd.InputPart) error {
	if int64(len(p.Data)) > b.d.MaxInputFileBytes {
		return fieldError(field, "is %d bytes: an image or a file may be at most %d", len(p.Data), b.d.MaxInputFileBytes)
	}
	if len(p.Filename) > MaxFilenameBytes {
		return fieldError(field+".filename", "must be at most %d bytes", MaxFilenameBytes)
	}
	if err := Storable(field+".filename", p.Filename); err != nil {
		return err
	}
	if p.Type == agentd.PartFile {
		return file(field, p)
	}
	if p.Detail != "" && !slices.Contains(agentd.ImageDetails(), p.Detail) {
		return fieldError(field+".detail", "must be one of %s, not %q", strings.Join(agentd.ImageDetails(), ", "), p.Detail)
	}
	switch {
	case p.URL != "" && len(p.Data) > 0:
		return fieldError(field, "is an image by URL or by its data, not both")
	case p.URL != "":
		return imageURL(field+".url", p.URL)
	case len(p.Data) == 0:
		return fieldError(field, "is an image without a URL or data")
	case !slices.Contains(ImageMediaTypes, p.MediaType):
		return fieldError(field, "has media type %q: an image must be one of %s", p.MediaType, strings.Join(ImageMediaTypes, ", "))
	case sniffImage(p.Data) != p.MediaType:
		return fieldError(field, "says it is %s, but its bytes are not", p.MediaType)
	}
	return nil
}

// file checks a file of an input: a PDF, or a text in UTF-8.
func file(field string, p agentd.InputPart) error {
	switch {
	case p.URL != "":
		return fieldError(field, "is a file by URL: a file is sent as its data (a data URL), which agentd keeps")
	case len(p.Data) == 0:
		return fieldError(field, "is a file without data")
	case !slices.Contains(FileMediaTypes, p.MediaType):
		return fieldError(field, "has media type %q: a file must be one of %s", p.MediaType, strings.Join(FileMediaTypes, ", "))
	case p.MediaType == "application/pdf" && !bytes.HasPrefix(p.Data, []byte("%PDF-")):
		return fieldError(field, "says it is a PDF, but its bytes do not start as one (%%PDF-)")
	case p.MediaType != "application/pdf" && !utf8.Valid(p.Data):
		return fieldError(field, "is a text file that is not valid UTF-8")
	case p.MediaType != "application/pdf" && bytes.IndexByte(p.Data, 0) >= 0:
		return fieldError(field, "is a text file with a NUL character")
	}
	return nil
}

// imageURL checks an image's URL: an absolute http(s) URL with a host.
func imageURL(field, s string) error {
	if len(s) > MaxImageURLBytes {
		return fieldError(field, "must be at most %d bytes (send a larger image as a data URL)", MaxImageURLBytes)
	}
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fieldError(field, "must be an http(s) URL or a data URL")
	}
	return Storable(field, s)
}

// sniffImage names the image format data starts as, of ImageMediaTypes,
// by the standard library's content sniffing (the WHATWG algorithm);
// "" for none of them.
func sniffImage(data []byte) string {
	if t := http.DetectContentType(data); slices.Contains(ImageMediaTypes, t) {
		return t
	}
	return ""
}

// accepted checks that each model of models takes input of kind, as its
// profile says (Defaults.Accepts).
func (b *Builder) accepted(field string, kind agentd.PartType, models []string) error {
	if b.d.Accepts == nil {
		return nil
	}
	what := map[agentd.PartType]string{agentd.PartImage: "images", agentd.PartFile: "files"}[kind]
	for i, model := range models {
		if b.d.Accepts(model, kind) {
			continue
		}
		if i == 0 {
			return fieldError(field, "model %q does not take %s (its profile's \"input\" does not list %q): send text, or choose a model that does",
				model, what, string(kind))
		}
		return fieldError(field, "model %q, of the run's models, does not take %s (its profile's \"input\" does not list %q): "+
			"every model a run may fall back to must take its input", model, what, string(kind))
	}
	return nil
}
