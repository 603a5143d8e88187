import createClient, { type Client as FetchClient } from 'openapi-fetch';
import type { components, operations, paths } from './schema.js';
import { AgentdError, errorOf, retryAfterOf } from './errors.js';
import type { EventDataMap } from './eventdata.js';
import { readSSE } from './sse.js';

export type { EventDataMap };

type S = components['schemas'];
/** Run is a run as agentd shows it (GET /runs/{id}). */
export type Run = S['Run'];
/** RunStatus is a run's status. */
export type RunStatus = S['RunStatus'];
/** CreateRunRequest is the body of POST /runs. */
export type CreateRunRequest = S['CreateRunRequest'];
/** EventEnvelope is one stored event of a run, as its stream's `data:` holds it. */
export type EventEnvelope = S['EventEnvelope'];
/** EventType is the type of a run's event. */
export type EventType = S['EventType'];
/** HeartbeatData is the data of a stream's un-stored heartbeat. */
export type HeartbeatData = S['HeartbeatData'];
/** InputRequest is the body of POST /runs/{id}/input. */
export type InputRequest = S['InputRequest'];
/** RunInput is an input sent to a run while it works. */
export type RunInput = S['RunInput'];
/** RequiredAction is what a run in requires_action waits for. */
export type RequiredAction = S['RequiredAction'];
/** ActionRequest is the body of POST /runs/{id}/actions. */
export type ActionRequest = NonNullable<operations['resolveRunAction']['requestBody']>['content']['application/json'];
/** ListRunsQuery is the query of GET /runs. */
export type ListRunsQuery = NonNullable<operations['listRuns']['parameters']['query']>;

/**
 * RunEvent is one event of a run's stream: its envelope, with the exact bytes
 * of its `data:` as `raw`. It is a union on `type`, so that testing the type
 * gives the data its schema: `if (ev.type === 'run.completed') ev.data.output_text`.
 */
export type RunEvent = {
  [K in keyof EventDataMap]: Omit<EventEnvelope, 'type' | 'data'> & {
    type: K;
    data: EventDataMap[K];
    /** The envelope's JSON text, byte for byte as the server stored and sent it. */
    raw: string;
    /** True for a sub-agent's event forwarded in its parent's stream (`agent.event`, no id). */
    child?: boolean;
  };
}[keyof EventDataMap];

// EventDataMap names every type of EventType, and no other: a compile error
// here means api/openapi.yaml's EventType and x-event-types disagree.
type Same<A, B> = [Exclude<A, B>, Exclude<B, A>] extends [never, never] ? true : false;
type Assert<T extends true> = T;
export type EventTypesCovered = Assert<Same<EventType, keyof EventDataMap>>;

/** TerminalEvents are the types that end a run. */
export const TerminalEvents: readonly EventType[] = ['run.completed', 'run.failed', 'run.cancelled', 'run.timed_out', 'run.interrupted'];

/** EndedStatuses are the statuses of a run that has ended (interrupted included: it ends until resumed). */
export const EndedStatuses: readonly RunStatus[] = ['completed', 'failed', 'cancelled', 'timed_out', 'interrupted'];

/** isEnded tells whether run has ended (a run in requires_action has not). */
export function isEnded(run: Pick<Run, 'status'>): boolean {
  return EndedStatuses.includes(run.status);
}

/** AgentdOptions configure an Agentd client. */
export interface AgentdOptions {
  /** The server's base URL, e.g. http://localhost:8080. */
  baseUrl: string;
  /** An agentd API key (agd_...) or token, sent as `Authorization: Bearer`. */
  apiKey?: string;
  /** X-Tenant-ID: another tenant than the credential's (admin only). */
  tenant?: string;
  /** Headers sent with every request. */
  headers?: Record<string, string>;
  /** The fetch to use; globalThis.fetch by default. */
  fetch?: (request: Request) => Promise<Response>;
  /** How many times a call is tried in all, on a network error, 429, 502, 503 or 504 (default 3). */
  attempts?: number;
  /** The first wait between two tries, in ms, doubled each time, unless Retry-After says (default 250). */
  backoffMs?: number;
}

/** CallOptions are the options of one call. */
export interface CallOptions {
  /** The Idempotency-Key of a POST; made (a random UUID) when absent, and the same for each retry of the call. */
  idempotencyKey?: string;
  /** Aborts the call. */
  signal?: AbortSignal;
}

/** EventsOptions are the options of Agentd.events. */
export interface EventsOptions {
  /** Start after this seq (0, the default: from the first event). */
  after?: number;
  /** Stops following: the iterator throws the signal's reason. */
  signal?: AbortSignal;
  /** Yield sub-agents' events forwarded in the stream (`agent.event`), with `child: true`. */
  children?: boolean;
  /** Called with each heartbeat (un-stored, every 15 s while the run is quiet). */
  onHeartbeat?: (h: HeartbeatData) => void;
  /** The wait before connecting again after the stream broke, in ms (default: the server's `retry:` hint, 2000 unless it sets another). */
  reconnectWaitMs?: number;
  /** The longest wait between two connections while they keep failing, in ms (default 5000). */
  maxReconnectWaitMs?: number;
}

const retryableStatuses = new Set([429, 502, 503, 504]);

function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const t = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    const onAbort = () => {
      clearTimeout(t);
      reject(signal?.reason);
    };
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}

/** newIdempotencyKey makes a key for a POST: a random UUID. */
export function newIdempotencyKey(): string {
  return globalThis.crypto.randomUUID();
}

type Result<D> = { data?: D; error?: unknown; response: Response };

/**
 * Agentd is a client of agentd's native API. Its methods cover the common
 * flows (runs, their events, steering, decisions, agents, schedules,
 * webhooks, memory, datasets, evaluations) and throw an AgentdError for an error answer;
 * `raw` is the client generated from api/openapi.yaml (openapi-fetch), typed
 * for every route, for the rest. Every POST, raw ones included, carries an
 * Idempotency-Key (made unless given), the same on each retry, so that a
 * retry after a lost answer never does the thing twice.
 */
export class Agentd {
  /** raw is the typed openapi-fetch client of every route; its answers are {data, error, response}. */
  readonly raw: FetchClient<paths>;
  readonly agents: Agents;
  readonly schedules: Schedules;
  readonly webhooks: Webhooks;
  readonly memory: Memory;
  readonly datasets: Datasets;
  readonly evals: Evals;
  private readonly base: string;
  private readonly opts: AgentdOptions;

  constructor(opts: AgentdOptions) {
    this.opts = opts;
    this.base = opts.baseUrl.replace(/\/+$/, '');
    this.raw = createClient<paths>({ baseUrl: this.base, fetch: (r) => this.send(r) });
    this.agents = new Agents(this);
    this.schedules = new Schedules(this);
    this.webhooks = new Webhooks(this);
    this.memory = new Memory(this);
    this.datasets = new Datasets(this);
    this.evals = new Evals(this);
  }

  /** headersFor adds the client's headers, its credential and tenant, and a POST's Idempotency-Key, to h. */
  private headersFor(method: string, h: Headers): Headers {
    for (const [k, v] of Object.entries(this.opts.headers ?? {})) if (!h.has(k)) h.set(k, v);
    if (this.opts.apiKey) h.set('Authorization', `Bearer ${this.opts.apiKey}`);
    if (this.opts.tenant && !h.has('X-Tenant-ID')) h.set('X-Tenant-ID', this.opts.tenant);
    if (method === 'POST' && !h.has('Idempotency-Key')) h.set('Idempotency-Key', newIdempotencyKey());
    return h;
  }

  /**
   * send sends request, trying it again (with the same Idempotency-Key) on a
   * network error or a 429, 502, 503 or 504, as AgentdOptions say. It
   * answers the last response, whatever its status.
   */
  private async send(request: Request): Promise<Response> {
    const req = new Request(request, { headers: this.headersFor(request.method, new Headers(request.headers)) });
    const f = this.opts.fetch ?? ((r: Request) => globalThis.fetch(r));
    const attempts = Math.max(1, this.opts.attempts ?? 3);
    let wait = this.opts.backoffMs ?? 250;
    for (let attempt = 1; ; attempt++) {
      let delay = wait;
      try {
        const res = await f(attempt < attempts ? req.clone() : req);
        if (!retryableStatuses.has(res.status) || attempt >= attempts) return res;
        delay = (retryAfterOf(res) ?? 0) * 1000 || wait;
        await res.body?.cancel();
      } catch (err) {
        if (req.signal.aborted || attempt >= attempts || !(err instanceof TypeError)) throw err;
      }
      await sleep(delay, req.signal);
      wait *= 2;
    }
  }

  /** ok returns the data of an answer of raw, or throws its AgentdError. */
  async ok<D>(call: Promise<Result<D>>): Promise<D> {
    const { data, error, response } = await call;
    if (!response.ok) throw new AgentdError(response.status, error, retryAfterOf(response));
    return data as D;
  }

  /** headers are a call's headers: its Idempotency-Key when given. */
  static headers(o?: CallOptions, extra?: Record<string, string>): Record<string, string> {
    const h: Record<string, string> = { ...extra };
    if (o?.idempotencyKey) h['Idempotency-Key'] = o.idempotencyKey;
    return h;
  }

  /**
   * createRun starts a run (POST /runs) and answers it as committed: queued or
   * running. With wait (seconds, at most the server's ceiling), the answer
   * comes once the run settles, or after wait with the run as it is then.
   * Follow it with events, or waitRun.
   */
  createRun(body: Omit<CreateRunRequest, 'stream'>, o?: CallOptions & { wait?: number }): Promise<Run> {
    const extra: Record<string, string> = o?.wait ? { Prefer: `wait=${o.wait}` } : {};
    return this.ok(this.raw.POST('/runs', { body, headers: Agentd.headers(o, extra), signal: o?.signal })) as Promise<Run>;
  }

  /** getRun reads a run; with wait (seconds), once it settles or after wait. */
  getRun(id: string, o?: { wait?: number; signal?: AbortSignal }): Promise<Run> {
    const query = o?.wait ? { wait: o.wait } : undefined;
    return this.ok(this.raw.GET('/runs/{id}', { params: { path: { id }, query }, signal: o?.signal }));
  }

  /**
   * waitRun waits until the run has ended (or, with settled, until it also
   * waits for a decision: requires_action) and answers it then.
   */
  async waitRun(id: string, o?: { settled?: boolean; signal?: AbortSignal }): Promise<Run> {
    for (;;) {
      const run = await this.getRun(id, { wait: 30, signal: o?.signal });
      if (isEnded(run) || (o?.settled && run.status === 'requires_action')) return run;
      if (run.status === 'requires_action') await sleep(500, o?.signal);
    }
  }

  /** listRuns reads a page of the tenant's runs, newest first. */
  listRuns(query?: ListRunsQuery, o?: { signal?: AbortSignal }) {
    return this.ok(this.raw.GET('/runs', { params: { query }, signal: o?.signal }));
  }

  /** steps reads a run's steps, with their tool calls, attempts and receipts. */
  steps(id: string) {
    return this.ok(this.raw.GET('/runs/{id}/steps', { params: { path: { id } } }));
  }

  /** cancelRun cancels a run; it answers within about 2 s, the run ended or still stopping. */
  cancelRun(id: string, o?: CallOptions): Promise<Run> {
    return this.ok(this.raw.POST('/runs/{id}/cancel', { params: { path: { id } }, headers: Agentd.headers(o), signal: o?.signal }));
  }

  /** resumeRun continues a run that ended without completing, from its last committed step. */
  resumeRun(id: string, o?: CallOptions): Promise<Run> {
    return this.ok(this.raw.POST('/runs/{id}/resume', { params: { path: { id } }, headers: Agentd.headers(o), signal: o?.signal }));
  }

  /**
   * steer sends input to a run while it works (POST /runs/{id}/input): the
   * run applies it at its next step boundary (`when: 'now'`: cutting the
   * model's answer under way). It answers once the input is committed. The
   * same idempotencyKey gives the same input, never a second one.
   */
  steer(id: string, input: string | InputRequest, o?: CallOptions): Promise<RunInput> {
    const body: InputRequest = typeof input === 'string' ? { input } : input;
    return this.ok(this.raw.POST('/runs/{id}/input', { params: { path: { id } }, body, headers: Agentd.headers(o), signal: o?.signal }));
  }

  /** inputs lists a run's inputs, in the order it accepted them. */
  inputs(id: string) {
    return this.ok(this.raw.GET('/runs/{id}/inputs', { params: { path: { id } } }));
  }

  /** act answers what a waiting run asks (POST /runs/{id}/actions); the run goes on. */
  act(id: string, body: ActionRequest, o?: CallOptions): Promise<Run> {
    return this.ok(this.raw.POST('/runs/{id}/actions', { params: { path: { id } }, body, headers: Agentd.headers(o), signal: o?.signal }));
  }

  /** callOf names the call a decision is about: the one given, or the one the run waits about. */
  private async callOf(id: string, toolCallId?: string): Promise<string> {
    if (toolCallId) return toolCallId;
    const run = await this.getRun(id);
    if (!run.required_action) throw new Error(`agentd: run ${id} waits for no decision (it is ${run.status})`);
    return run.required_action.tool_call_id;
  }

  /** approve approves the tool call a run waits about (toolCallId, or the run's required_action's). */
  async approve(id: string, toolCallId?: string, o?: CallOptions): Promise<Run> {
    return this.act(id, { tool_call_id: await this.callOf(id, toolCallId), decision: 'approve' }, o);
  }

  /** reject rejects the tool call a run waits about; the model is told error. */
  async reject(id: string, error?: string, toolCallId?: string, o?: CallOptions): Promise<Run> {
    return this.act(id, { tool_call_id: await this.callOf(id, toolCallId), decision: 'reject', error }, o);
  }

  /** submitToolOutputs gives the results of the run's client tool calls, one per call. */
  submitToolOutputs(id: string, outputs: NonNullable<ActionRequest['outputs']>, o?: CallOptions): Promise<Run> {
    return this.act(id, { type: 'tool_outputs', outputs }, o);
  }

  /** fork starts a new run from the run's conversation after one of its steps. */
  fork(id: string, body: S['ForkRequest'], o?: CallOptions): Promise<Run> {
    return this.ok(this.raw.POST('/runs/{id}/fork', { params: { path: { id } }, body, headers: Agentd.headers(o), signal: o?.signal })) as Promise<Run>;
  }

  /**
   * sendMessage sends a message to a conversation (its session's door): it
   * steers the run in flight, or starts the conversation's next run.
   */
  sendMessage(conversationId: string, body: S['SendRequest'], o?: CallOptions): Promise<S['Send']> {
    return this.ok(
      this.raw.POST('/conversations/{id}/messages', { params: { path: { id: conversationId } }, body, headers: Agentd.headers(o), signal: o?.signal }),
    );
  }

  /**
   * events follows a run's events after o.after (0: from the first): the
   * stored ones, then the live ones, until the run's end. When the connection
   * breaks or the server goes away, it connects again with Last-Event-ID,
   * after the server's retry hint (doubling while connections keep failing,
   * up to maxReconnectWaitMs), so that it skips nothing and repeats nothing;
   * a run resumed after an end is followed past it. It throws an AgentdError
   * when the server refuses the stream (run_not_found, invalid_field), and
   * the signal's reason when it is aborted.
   *
   * A run that waits for a decision keeps its stream open: stop at
   * run.requires_action (break) to act on it, then follow again with after.
   */
  async *events(id: string, o: EventsOptions = {}): AsyncGenerator<RunEvent, void, undefined> {
    const state = { last: o.after ?? 0, retry: 1000 }; // retry: until the server's hint says
    let wait = 0;
    for (;;) {
      if (wait > 0) await sleep(wait, o.signal);
      const before = state.last;
      const r = yield* this.follow(id, state, o);
      if (r === 'ended') return;
      if (r === 'terminal') {
        wait = 0; // the server closed the stream after the run's end: ask at once whether more came since (204: no)
        continue;
      }
      const progressed = state.last > before;
      const first = o.reconnectWaitMs ?? state.retry;
      wait = progressed || wait === 0 ? first : Math.min(wait * 2, o.maxReconnectWaitMs ?? 5000);
    }
  }

  /**
   * follow reads one connection of a run's stream after state.last, yielding
   * each new event. It answers 'ended' when nothing more will come (204),
   * 'terminal' when the server closed the stream after a terminal event (a
   * run resumed since goes on: the next connection tells), and 'again' when
   * the stream broke.
   */
  private async *follow(id: string, state: { last: number; retry: number }, o: EventsOptions): AsyncGenerator<RunEvent, 'ended' | 'terminal' | 'again', undefined> {
    const ac = new AbortController();
    const onAbort = () => ac.abort(o.signal?.reason);
    o.signal?.addEventListener('abort', onAbort, { once: true });
    try {
      const headers = this.headersFor('GET', new Headers({ Accept: 'text/event-stream' }));
      if (state.last > 0) headers.set('Last-Event-ID', String(state.last));
      const f = this.opts.fetch ?? ((r: Request) => globalThis.fetch(r));
      const res = await f(new Request(`${this.base}/runs/${encodeURIComponent(id)}/events`, { headers, signal: ac.signal }));
      if (res.status === 204) return 'ended';
      if (res.status !== 200 || !res.body) {
        const err = await errorOf(res);
        if (!retryableStatuses.has(err.status) && err.status < 500) throw err;
        return 'again';
      }
      let terminal = false;
      for await (const msg of readSSE(res.body, (ms) => (state.retry = ms))) {
        if (msg.event === 'heartbeat') {
          o.onHeartbeat?.(JSON.parse(msg.data) as HeartbeatData);
          continue;
        }
        if (msg.id === undefined) {
          if (msg.event === 'agent.event' && o.children) yield { ...(JSON.parse(msg.data) as EventEnvelope), raw: msg.data, child: true } as RunEvent;
          continue;
        }
        const ev = JSON.parse(msg.data) as EventEnvelope;
        if (String(ev.seq) !== msg.id || ev.type !== msg.event) {
          throw new Error(`agentd: event ${msg.id} (${msg.event}) holds seq ${ev.seq} (${ev.type})`);
        }
        if (ev.seq <= state.last) continue;
        state.last = ev.seq;
        terminal = TerminalEvents.includes(ev.type);
        yield { ...ev, raw: msg.data } as RunEvent;
      }
      return terminal ? 'terminal' : 'again';
    } catch (err) {
      if (o.signal?.aborted) throw o.signal.reason;
      if (err instanceof AgentdError || err instanceof SyntaxError || (err instanceof Error && err.message.startsWith('agentd: event'))) throw err;
      return 'again'; // a broken connection: connect again after the last event received
    } finally {
      o.signal?.removeEventListener('abort', onAbort);
      ac.abort();
    }
  }

  /** streamRun starts a run, then follows its events to its end (createRun, then events). */
  async *streamRun(body: Omit<CreateRunRequest, 'stream'>, o?: CallOptions & Omit<EventsOptions, 'after'>): AsyncGenerator<RunEvent, void, undefined> {
    const run = await this.createRun(body, o);
    yield* this.events(run.id, o);
  }
}

/** Agents are the tenant's agents: named, versioned run definitions. */
export class Agents {
  constructor(private readonly c: Agentd) {}
  /** create makes an agent, its version 1. */
  create(body: S['AgentRequest'], o?: CallOptions): Promise<S['Agent']> {
    return this.c.ok(this.c.raw.POST('/agents', { body, headers: Agentd.headers(o) }));
  }
  /** get reads an agent: its latest version, or version. */
  get(name: string, version?: number): Promise<S['Agent']> {
    if (version) return this.c.ok(this.c.raw.GET('/agents/{name}/versions/{version}', { params: { path: { name, version } } }));
    return this.c.ok(this.c.raw.GET('/agents/{name}', { params: { path: { name } } }));
  }
  /** list reads a page of the tenant's agents. */
  list(query?: NonNullable<operations['listAgents']['parameters']['query']>): Promise<S['AgentList']> {
    return this.c.ok(this.c.raw.GET('/agents', { params: { query } }));
  }
  /** update makes the agent's next version. */
  update(name: string, body: S['AgentUpdateRequest']): Promise<S['Agent']> {
    return this.c.ok(this.c.raw.PUT('/agents/{name}', { params: { path: { name } }, body }));
  }
  /** versions reads a page of an agent's versions. */
  versions(name: string, query?: NonNullable<operations['listAgentVersions']['parameters']['query']>) {
    return this.c.ok(this.c.raw.GET('/agents/{name}/versions', { params: { path: { name }, query } }));
  }
  /** delete deletes an agent; its runs stay. */
  async delete(name: string): Promise<void> {
    await this.c.ok(this.c.raw.DELETE('/agents/{name}', { params: { path: { name } } }));
  }
}

/** Schedules are the tenant's schedules: each slot of a cron expression starts one run. */
export class Schedules {
  constructor(private readonly c: Agentd) {}
  /** create makes a schedule. */
  create(body: S['ScheduleRequest'], o?: CallOptions): Promise<S['Schedule']> {
    return this.c.ok(this.c.raw.POST('/schedules', { body, headers: Agentd.headers(o) }));
  }
  /** get reads a schedule. */
  get(id: string): Promise<S['Schedule']> {
    return this.c.ok(this.c.raw.GET('/schedules/{id}', { params: { path: { id } } }));
  }
  /** list reads a page of the tenant's schedules. */
  list(query?: NonNullable<operations['listSchedules']['parameters']['query']>): Promise<S['ScheduleList']> {
    return this.c.ok(this.c.raw.GET('/schedules', { params: { query } }));
  }
  /** update changes a schedule (PATCH). */
  update(id: string, body: S['ScheduleUpdateRequest']): Promise<S['Schedule']> {
    return this.c.ok(this.c.raw.PATCH('/schedules/{id}', { params: { path: { id } }, body }));
  }
  /** pause stops a schedule's slots from starting runs until resume. */
  pause(id: string): Promise<S['Schedule']> {
    return this.update(id, { paused: true });
  }
  /** resume resumes a schedule: its next slot is the first from now. */
  resume(id: string): Promise<S['Schedule']> {
    return this.update(id, { paused: false });
  }
  /** runs reads a page of a schedule's runs, the newest slot first. */
  runs(id: string, query?: NonNullable<operations['listScheduleRuns']['parameters']['query']>) {
    return this.c.ok(this.c.raw.GET('/schedules/{id}/runs', { params: { path: { id }, query } }));
  }
  /** delete deletes a schedule; its runs stay. */
  async delete(id: string): Promise<void> {
    await this.c.ok(this.c.raw.DELETE('/schedules/{id}', { params: { path: { id } } }));
  }
}

/** Webhooks are the tenant's webhook subscriptions and their deliveries. */
export class Webhooks {
  constructor(private readonly c: Agentd) {}
  /** create subscribes a URL; the answer holds its signing secret, shown only then. */
  create(body: S['WebhookRequest'], o?: CallOptions): Promise<S['Webhook']> {
    return this.c.ok(this.c.raw.POST('/webhooks', { body, headers: Agentd.headers(o) }));
  }
  /** get reads a subscription. */
  get(id: string): Promise<S['Webhook']> {
    return this.c.ok(this.c.raw.GET('/webhooks/{id}', { params: { path: { id } } }));
  }
  /** list reads a page of the tenant's subscriptions. */
  list(query?: NonNullable<operations['listWebhooks']['parameters']['query']>): Promise<S['WebhookList']> {
    return this.c.ok(this.c.raw.GET('/webhooks', { params: { query } }));
  }
  /** update changes a subscription (PATCH), e.g. {enabled: true} after the server disabled it. */
  update(id: string, body: S['WebhookUpdateRequest']): Promise<S['Webhook']> {
    return this.c.ok(this.c.raw.PATCH('/webhooks/{id}', { params: { path: { id } }, body }));
  }
  /** deliveries reads a page of a subscription's deliveries, newest first, with their attempts. */
  deliveries(id: string, query?: NonNullable<operations['listWebhookDeliveries']['parameters']['query']>): Promise<S['WebhookDeliveryList']> {
    return this.c.ok(this.c.raw.GET('/webhooks/{id}/deliveries', { params: { path: { id }, query } }));
  }
  /** redeliver makes a delivery due again. */
  redeliver(id: string, deliveryId: string, o?: CallOptions): Promise<S['WebhookDelivery']> {
    return this.c.ok(
      this.c.raw.POST('/webhooks/{id}/deliveries/{delivery_id}/redeliver', { params: { path: { id, delivery_id: deliveryId } }, headers: Agentd.headers(o) }),
    );
  }
  /** delete deletes a subscription. */
  async delete(id: string): Promise<void> {
    await this.c.ok(this.c.raw.DELETE('/webhooks/{id}', { params: { path: { id } } }));
  }
}

/** Memory is the tenant's memory: versioned items in namespaces, and search. */
export class Memory {
  constructor(private readonly c: Agentd) {}
  /** put writes an item's next version. */
  put(body: S['MemoryPutRequest']): Promise<S['MemoryItem']> {
    return this.c.ok(this.c.raw.PUT('/memory/items', { body }));
  }
  /** get reads a live item (as it was at asOf, an RFC 3339 time, when given). */
  get(namespace: string, key: string, asOf?: string): Promise<S['MemoryItem']> {
    return this.c.ok(this.c.raw.GET('/memory/item', { params: { query: { namespace, key, as_of: asOf } } }));
  }
  /** list reads a page of the live items under a namespace prefix. */
  list(query?: NonNullable<operations['listMemoryItems']['parameters']['query']>): Promise<S['MemoryItemPage']> {
    return this.c.ok(this.c.raw.GET('/memory/items', { params: { query } }));
  }
  /** versions reads a page of an item's versions. */
  versions(query: operations['listMemoryItemVersions']['parameters']['query']) {
    return this.c.ok(this.c.raw.GET('/memory/item/versions', { params: { query } }));
  }
  /** search finds items by meaning and words. */
  search(body: S['MemorySearchRequest'], o?: CallOptions): Promise<S['MemorySearchResult']> {
    return this.c.ok(this.c.raw.POST('/memory/search', { body, headers: Agentd.headers(o) }));
  }
  /** delete deletes an item (a tombstone version). */
  delete(query: operations['deleteMemoryItem']['parameters']['query']) {
    return this.c.ok(this.c.raw.DELETE('/memory/item', { params: { query } }));
  }
}

/** Datasets are the tenant's datasets of evaluation cases, versioned. */
export class Datasets {
  constructor(private readonly c: Agentd) {}
  /** create makes a dataset, its version 1. */
  create(body: S['DatasetRequest'], o?: CallOptions): Promise<S['Dataset']> {
    return this.c.ok(this.c.raw.POST('/datasets', { body, headers: Agentd.headers(o) }));
  }
  /** get reads a dataset: its latest version, or version. */
  get(name: string, version?: number): Promise<S['Dataset']> {
    if (version) return this.c.ok(this.c.raw.GET('/datasets/{name}/versions/{version}', { params: { path: { name, version } } }));
    return this.c.ok(this.c.raw.GET('/datasets/{name}', { params: { path: { name } } }));
  }
  /** list reads a page of the tenant's datasets. */
  list(query?: NonNullable<operations['listDatasets']['parameters']['query']>): Promise<S['DatasetList']> {
    return this.c.ok(this.c.raw.GET('/datasets', { params: { query } }));
  }
  /** cases reads a page of a dataset's cases. */
  cases(name: string, query?: NonNullable<operations['listDatasetCases']['parameters']['query']>): Promise<S['DatasetCaseList']> {
    return this.c.ok(this.c.raw.GET('/datasets/{name}/cases', { params: { path: { name }, query } }));
  }
  /** addCases adds cases: the dataset's next version. */
  addCases(name: string, body: S['DatasetCasesRequest'], o?: CallOptions): Promise<S['Dataset']> {
    return this.c.ok(this.c.raw.POST('/datasets/{name}/cases', { params: { path: { name } }, body, headers: Agentd.headers(o) }));
  }
  /** removeCase removes a case: the dataset's next version. */
  removeCase(name: string, caseId: string): Promise<S['Dataset']> {
    return this.c.ok(this.c.raw.DELETE('/datasets/{name}/cases/{case_id}', { params: { path: { name, case_id: caseId } } }));
  }
  /** delete deletes a dataset. */
  async delete(name: string): Promise<void> {
    await this.c.ok(this.c.raw.DELETE('/datasets/{name}', { params: { path: { name } } }));
  }
}

/** Evals are the tenant's evaluations: an agent's versions run on a dataset's cases, and scored. */
export class Evals {
  constructor(private readonly c: Agentd) {}
  /** create starts an evaluation; it answers it running, and get reports. */
  create(body: S['EvaluationRequest'], o?: CallOptions): Promise<S['Evaluation']> {
    return this.c.ok(this.c.raw.POST('/evals', { body, headers: Agentd.headers(o) }));
  }
  /** get reads an evaluation with its report: per version, regressions first, then each case's runs. */
  get(id: string): Promise<S['Evaluation']> {
    return this.c.ok(this.c.raw.GET('/evals/{id}', { params: { path: { id } } }));
  }
  /** wait reads the evaluation until it is no longer running, every pollMs (default 500). */
  async wait(id: string, o?: { pollMs?: number; signal?: AbortSignal }): Promise<S['Evaluation']> {
    for (;;) {
      const e = await this.get(id);
      if (e.status !== 'running') return e;
      await sleep(o?.pollMs ?? 500, o?.signal);
    }
  }
  /** list reads a page of the tenant's evaluations. */
  list(query?: NonNullable<operations['listEvals']['parameters']['query']>): Promise<S['EvaluationList']> {
    return this.c.ok(this.c.raw.GET('/evals', { params: { query } }));
  }
  /** cancel stops an evaluation: runs not yet made are not. */
  cancel(id: string, o?: CallOptions): Promise<S['Evaluation']> {
    return this.c.ok(this.c.raw.POST('/evals/{id}/cancel', { params: { path: { id } }, headers: Agentd.headers(o) }));
  }
}
