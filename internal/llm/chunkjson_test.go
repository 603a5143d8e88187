package llm

import (
	"encoding/json"
	"reflect"
	"testing"
)

// textChunks are chunks of the kind decodeTextChunk reads: the fake's, and
// OpenAI's as it sends them, with the fields it adds.
var textChunks = []string{
	`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1700000000,"model":"fake","choices":[{"index":0,"delta":{"content":"tok "},"finish_reason":null}]}`,
	`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1700000000,"model":"fake","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}`,
	`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1700000000,"model":"fake","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`,
	`{"id":"chatcmpl-B","object":"chat.completion.chunk","created":1741569952,"model":"gpt-4.1-2025-04-14","service_tier":"default",` +
		`"system_fingerprint":"fp_1","choices":[{"index":0,"delta":{"content":"Line one\nand \"two\" \u00e9 \ud83d\ude00"},"logprobs":null,` +
		`"finish_reason":null}],"usage":null,"obfuscation":"x1"}`,
	` { "choices" : [ { "index" : 1 , "delta" : { "content" : "héllo ✓" , "refusal" : null } } ] , "x" : [1, -2.5e+3, true, false, {"a": [null]}] } `,
	`{"choices":[],"error":null}`,
	`{"x":"ÿé","choices":[{"index":0,"delta":{"content":"x"}}]}`,
	`{"choices":null}`,
	`{}`,
}

// otherChunks go the slow way: usage, tool calls, an error, keys of
// another case, repeated keys, odd numbers, invalid JSON or UTF-8.
var otherChunks = []string{
	`{"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":5}}`,
	`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"c","function":{"name":"f","arguments":""}}]}}]}`,
	`{"error":{"message":"overloaded"}}`,
	`{"Choices":[{"index":0,"delta":{"content":"x"}}]}`,
	`{"choices":[{"INDEX":0,"delta":{"Content":"x"}}]}`,
	`{"choices":[{"index":0,"delta":{"content":"x"}}],"choices":[]}`,
	`{"choices":[{"index":0.5,"delta":{"content":"x"}}]}`,
	`{"choices":[{"index":01,"delta":{"content":"x"}}]}`,
	`{"choices":[{"index":0,"delta":{"content":"\xff"}}]}`,
	`{"choices":[{"index":0,"delta":{"content":"x"}}]} x`,
	`{"choices":[{"index":0,"delta":{"content":"x"}},]}`,
	`{"created":1.}`,
	`{"choices":[{"index":0,"delta":{"content":"a` + "\t" + `b"}}]}`,
	`[1]`,
	`{"x":"\q","choices":[]}`,
	// Cut where a value is due (the fuzzer found the first: an index
	// read past the end).
	`{"choices":[{"index":`,
	`{"choices":[{"index":-`,
	`{"choices":[{"index":0,"delta":{"content":`,
	`{"choices":[{"index":0,"finish_reason":`,
	`{"choices":`,
	`{"x":`,
	`{"x":-`,
}

func TestDecodeTextChunk(t *testing.T) {
	for _, in := range textChunks {
		var c chunk
		if !decodeTextChunk([]byte(in), &c) {
			t.Errorf("not read: %s", in)
			continue
		}
		sameAsEncodingJSON(t, []byte(in), c)
	}
	for _, in := range otherChunks {
		var c chunk
		if decodeTextChunk([]byte(in), &c) {
			t.Errorf("read, want the slow way: %s -> %+v", in, c)
		}
	}
}

// FuzzDecodeTextChunk: whatever decodeTextChunk reads, encoding/json reads
// the same, without error.
func FuzzDecodeTextChunk(f *testing.F) {
	for _, in := range append(textChunks, otherChunks...) {
		f.Add([]byte(in))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		var c chunk
		if decodeTextChunk(in, &c) {
			sameAsEncodingJSON(t, in, c)
		}
	})
}

func sameAsEncodingJSON(t *testing.T, in []byte, got chunk) {
	t.Helper()
	var want chunk
	if err := json.Unmarshal(in, &want); err != nil {
		t.Fatalf("%s: read, but encoding/json says %v", in, err)
	}
	if len(want.Error) > 0 && string(want.Error) != "null" {
		t.Fatalf("%s: read, but it is an error event", in)
	}
	want.Error = nil
	if len(want.Choices) == 0 {
		want.Choices = nil
	}
	if len(got.Choices) == 0 {
		got.Choices = nil
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%s:\nread        %+v\nencoding/json %+v", in, got, want)
	}
}

// BenchmarkDecodeChunk: a streamed text chunk, read by decodeTextChunk and
// by encoding/json.
func BenchmarkDecodeChunk(b *testing.B) {
	in := []byte(textChunks[0])
	b.Run("decodeTextChunk", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var c chunk
			if !decodeTextChunk(in, &c) {
				b.Fatal("not read")
			}
		}
	})
	b.Run("encoding/json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var c chunk
			if err := json.Unmarshal(in, &c); err != nil {
				b.Fatal(err)
			}
		}
	})
}
