// Package fakeanthropic is a fake of Anthropic's Messages API for tests:
// the endpoint the Anthropic adapter's real SDK client speaks to. Like
// fakellm, its answer is a function of the request, read from directives
// in the last user message; unlike fakellm it keeps one more state: a
// prompt cache, so that the cache usage it reports is what the real API
// would report for the breakpoints it received.
//
// It imports fakellm (its directive parser), nothing else of agentd's.
//
// # Endpoint
//
// POST /v1/messages, with "stream": true (Server-Sent Events: message_start,
// ping, then per content block content_block_start, its deltas and
// content_block_stop, then message_delta with stop_reason and usage, and
// message_stop, each as an "event:" line and a "data:" line), or without
// (one message object). Other paths get a 404, other methods a 405, in
// Anthropic's error body ({"type":"error","error":{"type","message"}}).
//
// # What it refuses
//
// With status 400 and an invalid_request_error in the real API's words, in
// this order: a body that is not JSON; no max_tokens, or one below 1;
// thinking of type enabled with a budget_tokens below 1024 or not below
// max_tokens; no messages; a role other than user or assistant, a first
// message that is not the user's, two messages of the same role in a row
// (the client merges them); a message without content (but a final
// assistant one) or an empty text block; a tool_result that answers no
// tool_use of the message just before it, a tool_use not answered by a
// tool_result in the message just after it; more than MaxBreakpoints blocks
// with cache_control (tools, system and messages counted together); a
// thinking block whose signature the fake did not make for its text (so a
// tampered thinking), a redacted_thinking whose data the fake did not
// make; with thinking on, a last user message that answers the tool_use
// of an assistant message that does not start with its thinking; an image
// or a document block outside a user message, a source that is not one
// (base64 that is not), an image of a media type other than image/jpeg,
// image/png, image/gif and image/webp, a base64 document that is not
// application/pdf (or text/plain). Then the
// directives are read (one malformed is a 400), and a model named
// "fake-<N>k" (as fakellm.ContextWindow) refuses a prompt of more than
// N*1024 tokens: "prompt is too long: P tokens > W maximum". A refused
// request uses no fault and no cache.
//
// # Directives
//
// Those of fakellm (its package doc), read from the text blocks of the
// last user message that has text (a user message of tool results alone
// does not count): /call NAME ARGS, /next, /say TEXT, /stream N MS,
// /finish length|content_filter [N] (here stop reasons max_tokens and
// refusal; N is ignored), /sampling (the answer is the request's
// max_tokens, temperature, top_p, tool_choice, thinking and output_config
// as sent, in a JSON object), /system (the answer is the system prompt's
// text), /media (the answer lists the image and document blocks of the
// request's messages as fakellm's /media does, a document as a file
// whose FILENAME is its title), and /fault KIND[@STEP] with KIND 429 (retry-after: 1,
// rate_limit_error), 500 (api_error), hang or truncate (half the events,
// then the connection is cut), and, of this fake only:
//
//	/fault 529
//	    Status 529 with an overloaded_error, the first time the request is
//	    seen (as fakellm's faults: a retry is answered).
//	/think TEXT
//	    With thinking on, every answer starts with a thinking block of TEXT
//	    (several lines joined with "\n"; without /think, "Thinking about
//	    step K."), streamed as thinking_delta then signature_delta. Its
//	    signature is the fake's own (an HMAC of the text under a constant
//	    key, so it holds across servers and processes), checked when the
//	    block comes back. Without thinking on, no thinking is returned.
//	/redacted TEXT
//	    With thinking on, a redacted_thinking block follows the thinking,
//	    whose data (TEXT, encoded, and its signature) is checked when it
//	    comes back.
//
// Step K is the number of assistant messages with tool_use after the last
// user message with text; it answers with the K-th /call group (tool_use
// blocks of ids "toolu_K_I", their input streamed as two input_json_delta
// pieces, stop_reason tool_use), or, when the groups run out, with the
// final text (stop_reason end_turn). A final text whose output tokens
// (below) would exceed max_tokens is cut to 4*max_tokens-1 bytes, with
// stop_reason max_tokens.
//
// # Usage and the prompt cache
//
// The fake lays out a request as the real API caches it: its tools, its
// system blocks, then its messages' blocks, in order. Each prefix that ends
// at a block has a hash (of the model's name and the blocks' JSON without
// cache_control) and a size: the bytes of those blocks' JSON, whose tokens
// are bytes/4, an image or a document block counted as fakellm counts an
// image or a file (fakellm.Media.PromptBytes), not as its base64. At each
// breakpoint (a block with cache_control), it looks
// for the longest prefix it cached before, ending at that block or at one
// of the Lookback blocks before it (as the real API looks back about 20
// blocks); then it caches the prefix of every breakpoint. It reports:
//
//	cache_read_input_tokens     = tokens of the longest cached prefix found
//	cache_creation_input_tokens = tokens of the prefix up to the last
//	                              breakpoint, less those read
//	input_tokens                = tokens of the whole request, less both
//	output_tokens               = bytes/4 + 1 of the answer's text, thinking
//	                              and tool names and inputs
//	output_tokens_details.thinking_tokens = bytes/4 of its thinking
//
// The cache never expires and has no minimum size (the real API's five
// minutes and 1024 tokens are left out): a test sees what its breakpoints
// would read and write.
//
// # Observing the fake
//
// Server records every request it handled (Requests: model, messages,
// breakpoints, step, status, error message, usage, the API key sent, the
// images and documents it held),
// counts requests in all (Calls) and per model (CallsFor), and sums the
// usage of completed answers (UsageTotal). WithOnDone registers a function
// called when each request is done.
package fakeanthropic
