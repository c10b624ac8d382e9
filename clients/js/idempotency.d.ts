// Type declarations of idempotency.js.

/** What the client does with an answer (clients/contract.json). */
export type Action = "retry" | "stop" | "done";

/** Prefix of the type URI of every problem the proxy answers itself. */
export declare const PROBLEM_BASE: "https://idempotency-proxy.dev/problems/";

/** The proxy's problem types (suffixes of PROBLEM_BASE) and what the client does with each. */
export declare const PROBLEM_ACTIONS: Readonly<Record<string, "retry" | "stop">>;

/** Statuses retried when the answer carries none of the proxy's problem types. */
export declare const RETRY_STATUSES: readonly number[];

/** decide says what to do with an answer. */
export declare function decide(status: number, problemType: string | null | undefined, replayed: boolean): Action;

/** parseRetryAfter reads Retry-After (delta-seconds or an HTTP-date) in milliseconds, or null. */
export declare function parseRetryAfter(value: string | null | undefined, now?: number): number | null;

/** newKey returns a fresh random key (a UUIDv4). */
export declare function newKey(): string;

/** An RFC 9457 problem detail. */
export interface Problem {
  type: string;
  title?: string;
  status?: number;
  detail?: string;
  [extension: string]: unknown;
}

/** The part of the Web Storage API the client uses. */
export interface KeyStorage {
  getItem(name: string): string | null;
  setItem(name: string, value: string): void;
  removeItem(name: string): void;
}

/** A KeyStorage kept in memory. */
export declare class MemoryStorage implements KeyStorage {
  getItem(name: string): string | null;
  setItem(name: string, value: string): void;
  removeItem(name: string): void;
}

/** What OnRetry sees before each wait between two attempts. */
export interface RetryInfo {
  /** The attempt that failed, from 1. */
  attempt: number;
  /** The wait before the next attempt, in ms. */
  delay: number;
  /** The failed attempt's status; 0 for a network error or an attempt timeout. */
  status: number;
  problem: Problem | null;
  /** The network error or timeout, null when there was a response. */
  error: unknown;
  key: string;
}

export interface ClientOptions {
  /** Requests one operation may send, the first included. Default 5. */
  maxAttempts?: number;
  /** Backoff before the second attempt, in ms; it doubles each retry (full jitter). Default 100. */
  baseDelay?: number;
  /** Cap of every wait, Retry-After included, in ms. Default 10000. */
  maxDelay?: number;
  /** Bound of one attempt until its response headers, in ms; 0 for none. Default 30000. */
  attemptTimeout?: number;
  /**
   * Where a named operation keeps its key until a final answer: "session"
   * (sessionStorage: survives a reload; the default), "local" (localStorage:
   * survives closing the tab), "memory", or any KeyStorage. Where the named
   * Web Storage does not exist (Node), keys are kept in memory.
   */
  storage?: "session" | "local" | "memory" | KeyStorage;
  /** The fetch to use. Default globalThis.fetch. */
  fetch?: typeof fetch;
  /** Called before each wait between two attempts or polls; for logs and metrics. */
  onRetry?: (retry: RetryInfo) => void;
  /**
   * Send Prefer: respond-async; a route with async: allow answers 202 with a
   * status URL, which request follows (GET, with the request's headers, after
   * each 202's Retry-After capped by maxDelay) to the operation's answer.
   * Default false.
   */
  respondAsync?: boolean;
  /** Polls of one status URL under respondAsync; then GaveUpError with status 202. Default 600. */
  maxPolls?: number;
  /** Waits between attempts and polls; rejects with signal.reason on abort. Default setTimeout. */
  sleep?: (ms: number, signal?: AbortSignal) => Promise<void>;
}

export interface RequestOptions extends RequestInit {
  /**
   * Names the logical operation ("checkout:order-42"): its key is stored
   * before the first attempt and dropped at a final answer, so a call after a
   * reload resumes the operation; concurrent calls with one name share one
   * operation and its result.
   */
  operation?: string;
  /** An explicit key, instead of a stored or fresh one; an Idempotency-Key in headers is one too. */
  key?: string;
  /** A value sent as the JSON body (Content-Type: application/json unless set). */
  json?: unknown;
  /**
   * Aborts the whole operation, waits included, and then the returned
   * response's body, as fetch's own does; the key stays stored.
   */
  signal?: AbortSignal;
  /**
   * "manual" unless set: a redirect is the operation's answer, never
   * followed with its key (in a browser a response of type "opaqueredirect").
   */
  redirect?: RequestRedirect;
}

/** A final answer. */
export interface Result {
  response: Response;
  status: number;
  /** The answer is the recorded one of an earlier execution (Idempotent-Replayed: true). */
  replayed: boolean;
  /** A replay whose body was too large to record: the body is empty. */
  bodyOmitted: boolean;
  key: string;
  attempts: number;
  /** Polls of the status URL under respondAsync; absent when the request answered itself. */
  polls?: number;
}

export interface ErrorDetails {
  key?: string;
  attempts?: number;
  status?: number;
  problem?: Problem | null;
  cause?: unknown;
}

/** Base class of the client's errors. */
export declare class IdempotencyError extends Error {
  constructor(message: string, details?: ErrorDetails);
  /** The operation's key. */
  key: string;
  attempts: number;
  /** The last status, 0 when the last attempt got no response. */
  status: number;
  problem: Problem | null;
}

/** The proxy answered a problem no retry with this key can change. */
export declare class ProblemError extends IdempotencyError {
  problem: Problem;
}

/** 422 payload-mismatch: the key was first used with a different request. */
export declare class PayloadMismatchError extends ProblemError {}

/** 410 key-expired: the operation ran once and its record expired. */
export declare class KeyExpiredError extends ProblemError {}

/** Attempts exhausted, or the signal aborted; the operation's key stays stored. */
export declare class GaveUpError extends IdempotencyError {}

/** Polls of one status URL under respondAsync by default (600: ten minutes at Retry-After: 1). */
export declare const DEFAULT_MAX_POLLS: number;

export declare class IdempotentClient {
  constructor(options?: ClientOptions);
  maxAttempts: number;
  baseDelay: number;
  maxDelay: number;
  attemptTimeout: number;
  storage: KeyStorage;
  respondAsync: boolean;
  maxPolls: number;
  sleep: (ms: number, signal?: AbortSignal) => Promise<void>;
  /** The key an unfinished operation of this name keeps, or null. */
  pending(operation: string): string | null;
  /** Drops the key an operation keeps: its next call is a new operation. */
  forget(operation: string): void;
  /** Sends one logical operation, retrying it with the same key. */
  request(url: string | URL, init?: RequestOptions): Promise<Result>;
}
