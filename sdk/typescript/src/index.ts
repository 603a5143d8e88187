/**
 * @agentd/sdk: a typed client of agentd's native API, generated from
 * api/openapi.yaml (openapi-typescript, openapi-fetch), with a hand-written
 * layer for run event streams that resume with Last-Event-ID, an
 * Idempotency-Key on every POST, and typed errors.
 */
export * from './client.js';
export * from './errors.js';
export { readSSE, type SSEMessage } from './sse.js';
export type { components, operations, paths } from './schema.js';
