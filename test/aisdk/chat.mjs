// Drives agentd's /ai-sdk/chat with the AI SDK's own Chat (the class under
// @ai-sdk/react's useChat, with an in-memory state) and DefaultChatTransport,
// and prints what the chat ended with as one JSON line.
//
//   node chat.mjs BASE_URL SCENARIO CHAT_ID [TEXT]
//
// Scenarios:
//   send      send TEXT; print the messages
//   twice     send TEXT, then TEXT again in the same chat; print the messages
//   cut       send TEXT through a fetch that drops the connection after a
//             few chunks, then resumeStream(); print the messages
//   resume    resumeStream() on a new Chat of CHAT_ID; print status and messages
//   stop      send TEXT, stop() after the first text, and DELETE the chat's
//             stream, as docs/clients.md wires useChat's stop; print the messages
//   approve   send TEXT, approve the call the run asks about, let the chat
//             send the approval; print the messages
//   client    send TEXT with a client tool pick_color, which the chat runs
//             (onToolCall, addToolOutput) and sends back; print the messages
//   files     send TEXT with two files, as useChat's sendMessage takes them
//             (file UI parts with data URLs): a PNG image and a PDF; then
//             TEXT again without files (the history the transport sends
//             back holds the first message's files); print the messages
//   fileslast the same, through a transport that sends the last message
//             alone (prepareSendMessagesRequest), as docs/clients.md says
//   badfile   send TEXT with a file whose data URL is not base64; print the
//             error
import { AbstractChat, DefaultChatTransport, lastAssistantMessageIsCompleteWithApprovalResponses, lastAssistantMessageIsCompleteWithToolCalls } from "ai";

const [base, scenario, chatId, text] = process.argv.slice(2);
const api = base + "/ai-sdk/chat";

class MemoryState {
  constructor() {
    this.messages = [];
    this.status = "ready";
    this.error = undefined;
  }
  pushMessage = (m) => { this.messages = [...this.messages, m]; };
  popMessage = () => { this.messages = this.messages.slice(0, -1); };
  replaceMessage = (i, m) => { this.messages = [...this.messages.slice(0, i), m, ...this.messages.slice(i + 1)]; };
  snapshot = (x) => structuredClone(x);
}

class Chat extends AbstractChat {
  constructor(init) {
    super({ ...init, state: new MemoryState() });
  }
}

const errors = [];
function newChat(options = {}) {
  return new Chat({ id: chatId, transport: new DefaultChatTransport({ api, ...options }), onError: (e) => errors.push(String(e)) });
}

// A fetch whose first response body breaks after `chunks` chunks, as a
// dropped connection does: the request is aborted (the server sees the
// client leave) and the body fails with a network error.
function cuttingFetch(chunks) {
  let used = false;
  return async (url, init) => {
    if (used) return fetch(url, init);
    used = true;
    const ac = new AbortController();
    const res = await fetch(url, { ...init, signal: ac.signal });
    const reader = res.body.getReader();
    let n = 0;
    const body = new ReadableStream({
      async pull(controller) {
        if (n++ >= chunks) {
          ac.abort();
          controller.error(new TypeError("network error"));
          return;
        }
        const { done, value } = await reader.read();
        if (done) controller.close();
        else controller.enqueue(value);
      },
    });
    return new Response(body, { status: res.status, headers: res.headers });
  };
}

async function until(cond, what, ms = 20000) {
  const end = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > end) throw new Error("timed out waiting for " + what);
    await new Promise((r) => setTimeout(r, 20));
  }
}

const out = {};
let chat;
switch (scenario) {
  case "send":
    chat = newChat();
    await chat.sendMessage({ text });
    break;
  case "twice":
    chat = newChat();
    await chat.sendMessage({ text });
    await chat.sendMessage({ text });
    break;
  case "cut": {
    chat = newChat({ fetch: cuttingFetch(3) });
    await chat.sendMessage({ text });
    out.afterCut = { status: chat.status, text: textOf(chat.messages.at(-1)) };
    await chat.resumeStream();
    break;
  }
  case "resume":
    chat = newChat();
    await chat.resumeStream();
    break;
  case "stop": {
    chat = newChat();
    const sent = chat.sendMessage({ text });
    await until(() => textOf(chat.messages.at(-1)) !== "", "the first text");
    await chat.stop();
    const res = await fetch(`${api}/${encodeURIComponent(chatId)}/stream`, { method: "DELETE" });
    out.deleteStatus = res.status;
    await sent;
    break;
  }
  case "approve": {
    chat = new Chat({ id: chatId, transport: new DefaultChatTransport({ api }),
      sendAutomaticallyWhen: lastAssistantMessageIsCompleteWithApprovalResponses, onError: (e) => errors.push(String(e)) });
    await chat.sendMessage({ text });
    const part = chat.messages.at(-1).parts.find((p) => p.state === "approval-requested");
    if (!part) throw new Error("no approval was requested: " + JSON.stringify(chat.messages.at(-1)));
    out.requested = part;
    await chat.addToolApprovalResponse({ id: part.approval.id, approved: true });
    await until(() => chat.status === "ready" && chat.messages.at(-1).parts.some((p) => p.state === "output-available"), "the approved call's output");
    await until(() => chat.status === "ready" && chat.messages.at(-1).metadata?.status === "completed", "the run's end");
    break;
  }
  case "client": {
    const clientTools = [{ name: "pick_color", description: "Ask the user for a color", parameters: { type: "object", properties: { hint: { type: "string" } } } }];
    chat = new Chat({
      id: chatId,
      transport: new DefaultChatTransport({ api, body: { client_tools: clientTools } }),
      sendAutomaticallyWhen: lastAssistantMessageIsCompleteWithToolCalls,
      onToolCall: async ({ toolCall }) => {
        if (toolCall.toolName === "pick_color") {
          chat.addToolOutput({ tool: "pick_color", toolCallId: toolCall.toolCallId, output: { color: "amber", hint: toolCall.input.hint } });
        }
      },
      onError: (e) => errors.push(String(e)),
    });
    await chat.sendMessage({ text });
    await until(() => chat.status === "ready" && chat.messages.at(-1).metadata?.status === "completed", "the run's end");
    break;
  }
  case "files":
  case "fileslast": {
    chat = newChat(scenario === "files" ? {} : {
      prepareSendMessagesRequest: ({ id, messages, body }) => ({ body: { ...body, id, messages: messages.slice(-1) } }),
    });
    const png = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==";
    const pdf = Buffer.from("%PDF-1.4\n1 0 obj <<>> endobj\ntrailer <<>>\n%%EOF\n").toString("base64");
    await chat.sendMessage({ text, files: [
      { type: "file", mediaType: "image/png", filename: "pixel.png", url: `data:image/png;base64,${png}` },
      { type: "file", mediaType: "application/pdf", filename: "report.pdf", url: `data:application/pdf;base64,${pdf}` },
    ] });
    out.first = textOf(chat.messages.at(-1));
    await chat.sendMessage({ text });
    break;
  }
  case "badfile": {
    chat = newChat();
    await chat.sendMessage({ text, files: [{ type: "file", mediaType: "image/png", url: "data:image/png;base64,***" }] });
    break;
  }
  default:
    throw new Error("unknown scenario " + scenario);
}

function textOf(m) {
  if (!m || m.role !== "assistant") return "";
  return m.parts.filter((p) => p.type === "text").map((p) => p.text).join("");
}

out.status = chat.status;
out.errors = errors;
out.messages = chat.messages;
out.text = textOf(chat.messages.at(-1));
process.stdout.write(JSON.stringify(out) + "\n");
