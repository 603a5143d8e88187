package memory

import (
	"context"
	"fmt"
	"math"
	"net/http"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
)

// Embedder turns texts into vectors, one per text, in order.
type Embedder interface {
	// Embed returns the texts' embeddings, each scaled to length 1.
	Embed(ctx context.Context, texts []string) ([][]float32, error)
	// Model names the embedding model: vectors of another model are never
	// compared with its.
	Model() string
}

// OpenAIConfig configures an OpenAI-compatible /embeddings endpoint.
type OpenAIConfig struct {
	// BaseURL is the API root (".../v1").
	BaseURL string
	// APIKey is sent as a bearer token; "": none.
	APIKey string
	// Model is the embedding model's name; Dimensions, when > 0, asks for
	// vectors of that length.
	Model      string
	Dimensions int
	// HTTPClient, when set, sends the requests.
	HTTPClient *http.Client
}

// OpenAI is an Embedder over an OpenAI-compatible /embeddings endpoint,
// through openai-go's Embeddings API.
type OpenAI struct {
	client openai.Client
	cfg    OpenAIConfig
}

var _ Embedder = (*OpenAI)(nil)

// NewOpenAI returns an Embedder for cfg's endpoint. It takes nothing from
// the OPENAI_* environment: the configuration says everything.
func NewOpenAI(cfg OpenAIConfig) *OpenAI {
	opts := []option.RequestOption{option.WithBaseURL(cfg.BaseURL), option.WithAPIKey(cfg.APIKey),
		option.WithMaxRetries(1), option.WithAdminAPIKey("")}
	if cfg.HTTPClient != nil {
		opts = append(opts, option.WithHTTPClient(cfg.HTTPClient))
	}
	return &OpenAI{client: openai.NewClient(opts...), cfg: cfg}
}

// Model returns the configured model's name.
func (o *OpenAI) Model() string { return o.cfg.Model }

// Embed asks the endpoint for the texts' embeddings.
func (o *OpenAI) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	p := openai.EmbeddingNewParams{Model: openai.EmbeddingModel(o.cfg.Model),
		Input:          openai.EmbeddingNewParamsInputUnion{OfArrayOfStrings: texts},
		EncodingFormat: openai.EmbeddingNewParamsEncodingFormatFloat}
	if o.cfg.Dimensions > 0 {
		p.Dimensions = openai.Int(int64(o.cfg.Dimensions))
	}
	resp, err := o.client.Embeddings.New(ctx, p)
	if err != nil {
		return nil, fmt.Errorf("embeddings: %w", err)
	}
	out := make([][]float32, len(texts))
	for _, d := range resp.Data {
		if d.Index < 0 || int(d.Index) >= len(texts) {
			return nil, fmt.Errorf("embeddings: the endpoint answered index %d for %d texts", d.Index, len(texts))
		}
		v := make([]float32, len(d.Embedding))
		for i, x := range d.Embedding {
			v[i] = float32(x)
		}
		out[d.Index] = Normalize(v)
	}
	for i, v := range out {
		if len(v) == 0 {
			return nil, fmt.Errorf("embeddings: the endpoint answered no embedding for text %d", i)
		}
	}
	return out, nil
}

// Normalize scales v to length 1 in place (a zero vector stays zero), so
// that a dot product is the cosine, and returns it.
func Normalize(v []float32) []float32 {
	var n float64
	for _, x := range v {
		n += float64(x) * float64(x)
	}
	if n == 0 {
		return v
	}
	s := float32(1 / math.Sqrt(n))
	for i := range v {
		v[i] *= s
	}
	return v
}
