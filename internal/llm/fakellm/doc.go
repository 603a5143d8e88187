// Package fakellm is an OpenAI-compatible Chat Completions server for tests,
// benchmarks and offline use. Its answer is a pure function of the request: it
// reads directives from the last user message, so a test says in the prompt
// what the "model" will do, and in the model name how long a prompt it takes.
// Only one thing about an answer is stateful: a fault fires the first time a
// request is seen (an extraction's, the first N times), so that a retry of
// the same request succeeds.
//
// It imports nothing of agentd's.
//
// # Endpoint
//
// POST /v1/chat/completions (also POST /chat/completions, unless the server
// was made WithV1Only, as OpenAI's API is). The body is a Chat
// Completions request; "model" may be any string and is echoed back. With
// "stream": true the answer is Server-Sent Events (data: {chunk} lines, ended
// by data: [DONE]); otherwise one chat.completion JSON object. A body that is
// not valid JSON, or a malformed directive, gets a 400 with an OpenAI-style
// error body ({"error":{"message","type","code"}}), as do messages out of
// order (see Message order). Other paths get a 404
// with OpenAI's error body for them ({"error":{"message":"Invalid URL (POST
// /path)","type":"invalid_request_error","code":null}}), other methods 405.
//
// # Message order
//
// The fake refuses what OpenAI refuses about the order of messages, as a
// real endpoint does, so that a client that sends a conversation out of
// order fails its tests instead of its users: every assistant message with
// tool_calls must be followed at once by one tool message for each of its
// calls (in any order), and a tool message must answer a call of the
// assistant message that those tool messages follow. The first message out
// of order gets status 400 and OpenAI's body for it, word for word (its
// spelling of "preceeding" too; N is the index of that message in
// "messages"). A tool message that answers no call of the assistant
// message before it (a stray result, one answered twice, one after another
// message came between):
//
//	{"error":{"message":"Invalid parameter: messages with role 'tool' must
//	be a response to a preceeding message with 'tool_calls'.",
//	"type":"invalid_request_error","param":"messages.[N].role","code":null}}
//
// A message other than a tool message where calls were still unanswered
// (IDS the unanswered call ids, joined by ", "; when the messages end with
// calls unanswered, N is the assistant message's):
//
//	{"error":{"message":"An assistant message with 'tool_calls' must be
//	followed by tool messages responding to each 'tool_call_id'. The
//	following tool_call_ids did not have response messages: IDS",
//	"type":"invalid_request_error","param":"messages.[N].role","code":null}}
//
// (each one line). The order is checked once the body and its directives
// are read, before the context window and before any fault, which a
// refused request does not use up.
//
// # Directives
//
// Directives are the lines of the LAST user message that start with "/"
// (leading and trailing spaces trimmed); every other line is ignored, and so
// is a line that starts with "/" but is no directive listed here. Message
// content may be a string or a list of parts, whose text parts are joined
// with "\n" (other parts are ignored).
//
//	/call NAME ARGS
//	    A tool call to function NAME with arguments ARGS: the rest of the line,
//	    sent verbatim (it is not checked, so a test can send invalid JSON);
//	    empty ARGS means {}. Consecutive /call lines form one group: one
//	    response with parallel tool calls, in the order written.
//	/next
//	    Ends the current group of /call lines; the following /call lines form
//	    the next group. A /next with no /call before it (since the start or the
//	    last /next) is a no-op, so there are no empty groups.
//	/say TEXT
//	    The final answer. Several /say lines are joined with "\n". Without
//	    /say (and without /stream) the final answer is "ok".
//	/stream N MS
//	    Sends the final answer as N content chunks, MS milliseconds apart
//	    (N >= 1, MS >= 0). With /say, the text is split by runes into N
//	    near-equal pieces (the first len%N pieces one rune longer); a text of
//	    fewer than N runes is sent one rune per chunk. Without /say, the
//	    answer is the N words "tok1 tok2 ... tokN", one word per chunk (the
//	    first chunk "tok1", then " tok2", " tok3", ...). The MS pause is also
//	    kept between the chunks of a tool-call response. A non-streaming
//	    request waits (chunks-1)*MS and then answers at once. Every pause ends
//	    as soon as the request's context does (the client went away).
//	/fault KIND
//	/fault KIND@STEP
//	    The first time the fake sees this request, it fails with KIND instead
//	    of answering; the same request sent again (a retry) is answered
//	    normally. A request is identified by a SHA-256 hash of its model and
//	    its messages (decoded and re-encoded, so spacing and key order do not
//	    matter). With @STEP the fault applies only at that step (see below);
//	    several /fault lines may be given, for different steps. KIND is one of:
//	      429       status 429 with "Retry-After: 1" and a rate_limit_exceeded
//	                error body.
//	      500       status 500 with a server_error error body.
//	      hang      status 200 with the usual headers, flushed, then nothing
//	                until the client goes away.
//	      truncate  the stream is cut: if the response has tool calls, the
//	                first call's id and name and the first half of its
//	                arguments are sent; otherwise the first half of the text.
//	                Then the connection is closed without a finish_reason and
//	                without [DONE]. A non-streaming response is cut halfway
//	                through its JSON body.
//
//	/finish REASON [N]
//	    The final text ends with finish_reason REASON (length or
//	    content_filter) rather than stop; with N, only while the assistant
//	    text after the last user message holds the final text fewer than N
//	    times (a client that continues a cut answer sends it back), then
//	    stop.
//	/sampling
//	    The final answer (in place of /say's) is the request's sampling
//	    parameters as a JSON object: those of max_completion_tokens,
//	    temperature, top_p, response_format, tool_choice (both compacted)
//	    and parallel_tool_calls that it sent, in that order, e.g. {"temperature":0.2,"response_format":{"type":
//	    "json_object"}}; {} when it sent none. It is cut at
//	    max_completion_tokens as any answer is (see Sampling).
//	/system
//	    The final answer (in place of /say's) is the text of the request's
//	    first message when it is a system prompt, else empty.
//	/media
//	    The final answer (in place of /say's) is one line per image_url or
//	    file content part of the request's messages, in order (Media's
//	    String): "image MEDIA_TYPE SIZE" for a data URL (SIZE its decoded
//	    bytes), "image URL" for another URL, "file MEDIA_TYPE SIZE
//	    FILENAME" for a file's file_data, each followed by " detail=D" when
//	    it was sent with one; "no media" for none.
//
// A request whose last message has no directive and whose first message is
// a system prompt with Markdown headings ("## " lines), as agentd's
// compaction sends, is answered with those headings, in order, each with a
// bullet "- noted from N lines" (N the lines of the last message): a
// summary in the shape the prompt asks for.
//
// # Memory extraction
//
// A request whose first message is a system prompt holding
// ExtractionMarker ("You are agentd's memory extractor.", the first line
// of the prompt of agentd's memory extraction) is an extraction request,
// answered by the fake's extractor alone: the run's turn it quotes holds
// the run's own directives (/call, /say, /fault, ...), which were the
// run's model's, and they are ignored. The extractor reads these lines of
// every message of the request instead (every other line is ignored):
//
//	/remember KEY=VALUE
//	    A memory to keep: KEY (before the first "=", trimmed, not empty)
//	    with VALUE (the rest, trimmed). A later line of the same KEY
//	    replaces its value, in its first place.
//	/extract-fail KIND [N]
//	    The request fails with KIND the first N times it is seen (without
//	    N, every time), then is answered: 429 and 500 as /fault's, or
//	    invalid, which answers the text "I would rather not answer in
//	    JSON." (finish_reason stop) in place of the JSON.
//	/extract-delay MS
//	    The extractor waits MS milliseconds before it answers (or until
//	    the client goes away).
//
// The answer is the JSON the prompt asks for, the memories in the order
// their keys first came, {"memories":[{"key":"home","value":"Porto"}]}, or
// {"memories":[]} without a /remember line; a malformed line of these gets
// a 400 as a malformed directive does. In any other request these lines
// are no directives, and are ignored: a run's input may hold them for its
// extraction to read, and its own answer is not changed by them.
//
// # Sampling
//
// A request's max_completion_tokens (N) cuts its final text: a text whose
// completion_tokens (counted as in Usage, C/4+1) would exceed N is cut to
// its first 4N-1 bytes (less, to end on a rune boundary), whose
// completion_tokens is N, and ends with finish_reason "length", whatever
// /finish says; streamed, the chunks stop where the text does. A shorter
// text is answered whole. A tool-call answer is never cut. temperature,
// top_p and response_format change nothing of the answer; Request records
// them, and /sampling answers with them. A max_completion_tokens below 1,
// a temperature outside 0 to 2 or a top_p outside 0 to 1 is refused with
// status 400 and an invalid_request_error in the form of OpenAI's, naming
// the parameter (param), e.g.
//
//	{"error":{"message":"Invalid 'temperature': decimal above maximum
//	value. Expected a value <= 2, but got 2.5 instead.",
//	"type":"invalid_request_error","param":"temperature","code":null}}
//
// (one line), before the order of the messages is checked.
//
// # Steps
//
// The step k (0-based) is the number of assistant messages with tool_calls
// after the last user message. Step k answers with the k-th /call group
// (finish_reason "tool_calls", content null); when the groups run out it
// answers with the final text (finish_reason "stop"). Tool call ids are
// "call_K_I": K the step, I the index of the call in its group, so they are
// unique within a run and equal for a retry of the same request. The
// completion id is "chatcmpl-" followed by the first 24 hex digits of the
// request hash; "created" is always 1700000000.
//
// # Usage
//
// Usage is reported in a final chunk with empty choices when the request sets
// stream_options.include_usage, and always in a non-streaming response:
//
//	prompt_tokens        = P/4 + 1, P the byte length of all message contents
//	                       (text parts joined as above), tool call names and
//	                       tool call arguments, an image (image_url part)
//	                       counted as 4*ImageTokens bytes, a PDF (file part)
//	                       as a quarter of its decoded bytes and at least
//	                       4*ImageTokens, a text file as its decoded bytes
//	                       (Media.PromptBytes)
//	completion_tokens    = C/4 + 1, C the byte length of the answer text, or of
//	                       the names and arguments of its tool calls
//	cached_tokens        = prompt_tokens/2 when there is more than one message,
//	                       else 0 (prompt_tokens_details.cached_tokens)
//	reasoning_tokens     = completion_tokens/2
//	                       (completion_tokens_details.reasoning_tokens)
//	total_tokens         = prompt_tokens + completion_tokens
//
// (all divisions round down).
//
// # Context window
//
// A model named "fake-<N>k" (N a decimal integer from 1 to 1048576, without
// leading zeros: fake-1k, fake-8k, fake-128k) has a context window of N*1024
// tokens (ContextWindow). A request to it whose prompt_tokens, counted as
// above, exceed the window is refused (once its body and directives are
// read, before any fault, which it does not use up, and before a stream
// starts, with "stream": true too) with status 400 and the body OpenAI sends for it, word
// for word:
//
//	{"error":{"message":"This model's maximum context length is W tokens.
//	However, your messages resulted in P tokens. Please reduce the length of
//	the messages.","type":"invalid_request_error","param":"messages",
//	"code":"context_length_exceeded"}}
//
// (one line; W the window, P the prompt_tokens). A prompt of exactly W
// tokens is served. Any other model name ("fake", "gpt-4o", "fake-0k",
// "fake-xk") has no limit.
//
// # Embeddings
//
// POST /v1/embeddings (also POST /embeddings, unless WithV1Only) answers
// as OpenAI's embeddings API does: {"object":"list","data":[{"object":
// "embedding","index":i,"embedding":[...]}],"model","usage"}, one
// embedding per input (a string or a list of strings), of "dimensions"
// floats (default EmbeddingDimensions, 64), or base64 with
// "encoding_format": "base64". An embedding is Embed's, a pure function
// of the text: each word (lowercased; letters and digits) adds +1 or -1
// at the place its FNV-1a hash picks, and the vector is scaled to length
// 1. So texts that share words are near, by how many they share, and a
// test knows which texts are near without a model: "Lisbon trip" is
// nearer to "a trip to Lisbon" than to "peanut allergy". Embeddings
// requests are not recorded, nor counted by Calls.
//
// # Observing the fake
//
// Server records every request it handled (Requests, Calls; a refused
// request's record has its status and the message of its error body; each
// record has the request's sampling parameters and its images and files,
// Media), the
// usage it reported in responses that finished (UsageTotal), and whether
// the client went away before the response finished (Request.Cancelled,
// Cancelled), and, per model, the largest prompt_tokens of the requests it
// read, refused ones included (MaxPromptTokens), so a test can check that
// a conversation was kept within its window. WithOnDone registers a
// function called when each request is done, so a test can wait for the
// server side of a cancellation instead of polling.
package fakellm
