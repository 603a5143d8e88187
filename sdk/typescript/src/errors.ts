import type { components } from './schema.js';

/** Problem is the problem+json body agentd answers an error with (RFC 9457). */
export type Problem = components['schemas']['Problem'];

/** ProblemCode is the stable code of a problem, the one clients branch on. */
export type ProblemCode = Problem['code'];

/**
 * AgentdError is an error answer of agentd: its status, and the fields of its
 * problem+json body (`code` to branch on, `field` naming the field at fault for
 * `invalid_field` and `unknown_parameter`). A body that is no problem keeps its
 * text in `detail` and has the code `unknown`.
 */
export class AgentdError extends Error {
  /** The HTTP status. */
  readonly status: number;
  /** The problem's stable code (`invalid_field`, `run_not_found`, ...), or `unknown`. */
  readonly code: ProblemCode | 'unknown';
  /** The problem's type URI: https://agentd.dev/problems/ followed by the code, or about:blank. */
  readonly type: string;
  /** The problem's title, for people. */
  readonly title: string;
  /** The problem's detail, for people. */
  readonly detail?: string;
  /** The field (body field, query parameter or header) at fault. */
  readonly field?: string;
  /** unknown_tool: the tool that is not registered. */
  readonly tool?: string;
  /** memory_limit and dataset_limit: the limit the write would pass. */
  readonly limit?: Problem['limit'];
  /** conversation_busy: the run in flight. */
  readonly busyRunId?: string;
  /** run_ended: the conversation whose door takes the input instead. */
  readonly conversationId?: string;
  /** The request's id, as the server logged it. */
  readonly requestId?: string;
  /** The request path. */
  readonly instance?: string;
  /** Retry-After, in seconds, when the answer had one. */
  readonly retryAfter?: number;
  /** The whole body, as decoded. */
  readonly problem?: Problem;

  constructor(status: number, body: unknown, retryAfter?: number) {
    const p = isProblem(body) ? body : undefined;
    const detail = p ? p.detail : typeof body === 'string' && body !== '' ? body.trim() : undefined;
    super(`agentd: ${status} ${p ? p.code : 'unknown'}${detail ? `: ${detail}` : ''}`);
    this.name = 'AgentdError';
    this.status = status;
    this.code = p ? p.code : 'unknown';
    this.type = p?.type ?? 'about:blank';
    this.title = p?.title ?? '';
    this.detail = detail;
    this.field = p?.field;
    this.tool = p?.tool;
    this.limit = p?.limit;
    this.busyRunId = p?.busy_run_id;
    this.conversationId = p?.conversation_id;
    this.requestId = p?.request_id;
    this.instance = p?.instance;
    this.retryAfter = retryAfter;
    this.problem = p;
  }
}

function isProblem(body: unknown): body is Problem {
  return typeof body === 'object' && body !== null && typeof (body as { code?: unknown }).code === 'string';
}

/** isCode tells whether err is an AgentdError of code. */
export function isCode(err: unknown, code: ProblemCode): err is AgentdError {
  return err instanceof AgentdError && err.code === code;
}

/** errorOf reads an error answer (its body not yet read) into an AgentdError. */
export async function errorOf(response: Response): Promise<AgentdError> {
  const text = await response.text().catch(() => '');
  let body: unknown = text;
  try {
    body = JSON.parse(text);
  } catch {
    // not JSON: the text is the detail
  }
  return new AgentdError(response.status, body, retryAfterOf(response));
}

/** retryAfterOf is a response's Retry-After in seconds, when it has one. */
export function retryAfterOf(response: Response): number | undefined {
  const s = Number.parseInt(response.headers.get('Retry-After') ?? '', 10);
  return Number.isFinite(s) && s > 0 ? s : undefined;
}
