/** SSEMessage is one dispatched message of a Server-Sent Events stream. */
export interface SSEMessage {
  /** The `id:` of the message; undefined when it had none (agentd's heartbeats and forwarded child events). */
  id?: string;
  /** The `event:` type; `message` when none was given. */
  event: string;
  /** The `data:` lines, joined with "\n", as the SSE format says. */
  data: string;
}

/**
 * readSSE parses a Server-Sent Events body as the WHATWG rules say (lines
 * end in CR, LF or CRLF; a blank line dispatches; `:` starts a comment) and
 * yields each message. onRetry receives each `retry:` hint, in milliseconds.
 */
export async function* readSSE(
  body: ReadableStream<Uint8Array>,
  onRetry?: (ms: number) => void,
): AsyncGenerator<SSEMessage> {
  const decoder = new TextDecoder('utf-8');
  const reader = body.getReader();
  let buf = '';
  let skipLF = false; // the last chunk ended in CR: a LF that starts the next one belongs to it
  let id: string | undefined;
  let event = '';
  let data: string[] = [];
  let hasData = false;
  try {
    for (;;) {
      const { value, done } = await reader.read();
      buf += done ? decoder.decode() : decoder.decode(value, { stream: true });
      if (skipLF && buf.startsWith('\n')) buf = buf.slice(1);
      skipLF = false;
      let start = 0;
      for (;;) {
        const cr = buf.indexOf('\r', start);
        const lf = buf.indexOf('\n', start);
        const end = cr < 0 ? lf : lf < 0 ? cr : Math.min(cr, lf);
        if (end < 0) break;
        const line = buf.slice(start, end);
        if (buf[end] === '\r') {
          if (end + 1 === buf.length) skipLF = true;
          start = buf[end + 1] === '\n' ? end + 2 : end + 1;
        } else {
          start = end + 1;
        }
        if (line === '') {
          if (hasData) yield { id, event: event || 'message', data: data.join('\n') };
          id = undefined;
          event = '';
          data = [];
          hasData = false;
          continue;
        }
        if (line.startsWith(':')) continue;
        const colon = line.indexOf(':');
        const field = colon < 0 ? line : line.slice(0, colon);
        let value = colon < 0 ? '' : line.slice(colon + 1);
        if (value.startsWith(' ')) value = value.slice(1);
        switch (field) {
          case 'id':
            if (!value.includes('\0')) id = value;
            break;
          case 'event':
            event = value;
            break;
          case 'data':
            data.push(value);
            hasData = true;
            break;
          case 'retry':
            if (/^[0-9]+$/.test(value)) onRetry?.(Number(value));
            break;
        }
      }
      buf = buf.slice(start);
      if (done) return; // a message without its blank line is not dispatched
    }
  } finally {
    reader.releaseLock();
    await body.cancel().catch(() => {});
  }
}
