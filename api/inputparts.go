package api

import (
	"bytes"
	"encoding/base64"
	"net/http"

	"github.com/agentd/agentd/internal/runspec"
)

// readInputBody reads the body of a request that may carry images and
// files (POST /runs, the AI SDK's chat, the Responses API): the data of
// its images and files (data URLs, and base64 data) may take it past
// AGENTD_MAX_BODY_BYTES, by up to the base64 of the input files' cap, but
// the rest of it may not.
func (s *server) readInputBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	body, err := s.readBodyUpTo(w, r, s.maxInputBody())
	if err != nil {
		return nil, err
	}
	if n := int64(len(body)); n > s.maxBody && n-inputDataBytes(body) > s.maxBody {
		return nil, &http.MaxBytesError{Limit: s.maxBody}
	}
	return body, nil
}

// maxInputBody is the largest body readInputBody takes: AGENTD_MAX_BODY_BYTES
// and the base64 of the input files' cap.
func (s *server) maxInputBody() int64 {
	files := s.compose.Defaults().MaxInputFilesBytes
	return s.maxBody + int64(base64.StdEncoding.EncodedLen(int(files))) + int64(runspec.MaxInputParts)*64
}

// dataKeys are the keys whose string values hold the data of images and
// files, in the wire formats of the doors that take them.
var dataKeys = map[string]bool{"url": true, "data": true, "file_data": true, "image_url": true}

// inputDataBytes is the length of the strings of body (JSON) that hold
// the data of images and files: data URLs under dataKeys, and the base64
// of "data" and "file_data". It scans body as it is, allocating nothing
// for its strings; what is not JSON is the decoder's to refuse.
func inputDataBytes(body []byte) int64 {
	type level struct {
		object bool
		key    bool   // the next string of an object is a key
		last   []byte // the object's last key, as written
	}
	var stack []level
	var n int64
	for i := 0; i < len(body); i++ {
		top := len(stack) - 1
		switch c := body[i]; c {
		case '{', '[':
			stack = append(stack, level{object: c == '{', key: true})
		case '}', ']':
			if top >= 0 {
				stack = stack[:top]
			}
		case ',':
			if top >= 0 && stack[top].object {
				stack[top].key = true
			}
		case '"':
			end := runspec.StringEnd(body, i)
			v := body[i+1 : end]
			i = end
			switch {
			case top < 0 || !stack[top].object:
			case stack[top].key:
				stack[top].last, stack[top].key = v, false
			case dataKeys[string(stack[top].last)]:
				if bytes.HasPrefix(v, []byte("data:")) || string(stack[top].last) == "data" || string(stack[top].last) == "file_data" {
					n += int64(len(v))
				}
			}
		}
	}
	return n
}
