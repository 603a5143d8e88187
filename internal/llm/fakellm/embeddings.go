package fakellm

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"hash/fnv"
	"io"
	"math"
	"net/http"
	"strings"
	"unicode"
)

// EmbeddingDimensions is the length of the fake's embeddings when the
// request asks for none.
const EmbeddingDimensions = 64

// Embed is the fake's embedding of text in dims dimensions: each word
// (lowercased, split at anything but letters and digits) adds 1 at the
// place its FNV-1a hash picks, with the hash's sign bit as the sign; the
// sum is scaled to length 1 (a text without words is all zeros). Texts
// that share words are near (their cosine grows with the words shared);
// texts that share none are near 0, but for words whose hashes collide.
func Embed(text string, dims int) []float32 {
	v := make([]float32, dims)
	words := strings.FieldsFunc(strings.ToLower(text), func(r rune) bool {
		return !unicode.IsLetter(r) && !unicode.IsDigit(r)
	})
	for _, w := range words {
		h := fnv.New64a()
		_, _ = h.Write([]byte(w))
		sum := h.Sum64()
		sign := float32(1)
		if sum>>63 == 1 {
			sign = -1
		}
		v[int(sum%uint64(dims))] += sign
	}
	var norm float64
	for _, x := range v {
		norm += float64(x) * float64(x)
	}
	if norm > 0 {
		n := float32(math.Sqrt(norm))
		for i := range v {
			v[i] /= n
		}
	}
	return v
}

// embeddingsRequest is what the fake reads of an embeddings request.
type embeddingsRequest struct {
	Model          string          `json:"model"`
	Input          json.RawMessage `json:"input"`
	Dimensions     int             `json:"dimensions"`
	EncodingFormat string          `json:"encoding_format"`
}

// serveEmbeddings answers POST /v1/embeddings: one embedding (Embed) per
// input string, in order, as floats or, with encoding_format base64, as
// little-endian float32s in base64, as OpenAI's API does.
func (s *Server) serveEmbeddings(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		invalid(http.StatusBadRequest, "read body: "+err.Error()).write(w)
		return
	}
	var req embeddingsRequest
	if err := json.Unmarshal(body, &req); err != nil {
		invalid(http.StatusBadRequest, "invalid JSON body: "+err.Error()).write(w)
		return
	}
	var inputs []string
	if err := json.Unmarshal(req.Input, &inputs); err != nil {
		var one string
		if err := json.Unmarshal(req.Input, &one); err != nil {
			invalid(http.StatusBadRequest, "input must be a string or a list of strings").write(w)
			return
		}
		inputs = []string{one}
	}
	dims := req.Dimensions
	if dims <= 0 || dims > 4096 {
		dims = EmbeddingDimensions
	}
	type datum struct {
		Object    string `json:"object"`
		Index     int    `json:"index"`
		Embedding any    `json:"embedding"`
	}
	out := struct {
		Object string         `json:"object"`
		Data   []datum        `json:"data"`
		Model  string         `json:"model"`
		Usage  map[string]int `json:"usage"`
	}{Object: "list", Model: req.Model, Data: []datum{}}
	tokens := 0
	for i, in := range inputs {
		v := Embed(in, dims)
		tokens += len(strings.Fields(in))
		var e any = v
		if req.EncodingFormat == "base64" {
			b := make([]byte, 4*len(v))
			for j, x := range v {
				binary.LittleEndian.PutUint32(b[4*j:], math.Float32bits(x))
			}
			e = base64.StdEncoding.EncodeToString(b)
		}
		out.Data = append(out.Data, datum{Object: "embedding", Index: i, Embedding: e})
	}
	out.Usage = map[string]int{"prompt_tokens": tokens, "total_tokens": tokens}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(out)
}
