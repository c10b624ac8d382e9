// idempotency-proxy client for browsers and Node >= 18: one Idempotency-Key
// per logical operation, kept (by operation name) from before the first
// attempt until a final answer, and retried as clients/contract.json says.
// No dependencies; docs/clients.md describes it.

/** Prefix of the type URI of every problem the proxy answers itself. */
export const PROBLEM_BASE = "https://idempotency-proxy.dev/problems/";

/**
 * What the client does with each of the proxy's problem types: "retry" (same
 * request, same key, after Retry-After or backoff) or "stop" (an error no
 * retry can change). The JavaScript copy of clients/contract.json; the tests
 * hold it to that file.
 */
export const PROBLEM_ACTIONS = Object.freeze({
  "missing-key": "stop",
  "invalid-key": "stop",
  "body-unreadable": "stop",
  "ambiguous-body": "stop",
  "ambiguous-path": "stop",
  "ambiguous-method": "stop",
  "body-too-large": "stop",
  "in-flight": "retry",
  "key-expired": "stop",
  "payload-mismatch": "stop",
  "store-unavailable": "retry",
  "store-full": "retry",
  "record-unreadable": "stop",
  "upstream-unreachable": "retry",
  "upstream-failed": "retry",
  "upstream-timeout": "retry",
  "streaming-call": "stop",
  "status-unknown": "stop",
  "status-method": "stop",
});

/** Statuses retried when the answer carries none of the proxy's problem types. */
export const RETRY_STATUSES = Object.freeze([408, 409, 425, 429, 502, 503, 504]);

/**
 * decide says what to do with an answer: "retry", "stop" or "done".
 * @param {number} status
 * @param {string | null | undefined} problemType the problem+json type URI, if any
 * @param {boolean} replayed the answer carries Idempotent-Replayed: true
 */
export function decide(status, problemType, replayed) {
  if (replayed) return "done";
  if (typeof problemType === "string" && problemType.startsWith(PROBLEM_BASE)) {
    const action = PROBLEM_ACTIONS[problemType.slice(PROBLEM_BASE.length)];
    if (action) return action;
  }
  return RETRY_STATUSES.includes(status) ? "retry" : "done";
}

/** Base class of the client's errors; `key` is the operation's key. */
export class IdempotencyError extends Error {
  constructor(message, { key, attempts = 0, status = 0, problem = null, cause } = {}) {
    super(message, cause === undefined ? undefined : { cause });
    this.name = new.target.name;
    this.key = key;
    this.attempts = attempts;
    this.status = status;
    this.problem = problem;
  }
}

/** The proxy answered a problem no retry with this key can change. */
export class ProblemError extends IdempotencyError {}

/** 422 payload-mismatch: the key was first used with a different request; a bug in the caller. */
export class PayloadMismatchError extends ProblemError {}

/** 410 key-expired: the operation ran once and its record expired; look its outcome up. */
export class KeyExpiredError extends ProblemError {}

/**
 * Every attempt failed with a retryable answer or a network error, or the
 * caller's signal aborted the operation. The key stays stored under the
 * operation's name, so calling again resumes the same operation.
 */
export class GaveUpError extends IdempotencyError {}

// Web Crypto: global in browsers and Node >= 19; Node 18 has it in node:crypto.
// The specifier is a variable so that bundlers for browsers leave it alone.
const nodeCrypto = "node:crypto";
const webcrypto = globalThis.crypto ?? (await import(nodeCrypto)).webcrypto;

/** newKey returns a fresh random key (a UUIDv4). */
export function newKey() {
  if (typeof webcrypto.randomUUID === "function") return webcrypto.randomUUID();
  // randomUUID exists only in secure contexts (https, localhost); build one.
  const b = webcrypto.getRandomValues(new Uint8Array(16));
  b[6] = (b[6] & 0x0f) | 0x40;
  b[8] = (b[8] & 0x3f) | 0x80;
  const h = Array.from(b, (x) => x.toString(16).padStart(2, "0")).join("");
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20)}`;
}

const STORAGE_PREFIX = "idempotency-key:";

/** A Storage-like object kept in memory, for Node and for storage: "memory". */
export class MemoryStorage {
  #items = new Map();
  getItem(name) {
    return this.#items.has(name) ? this.#items.get(name) : null;
  }
  setItem(name, value) {
    this.#items.set(name, String(value));
  }
  removeItem(name) {
    this.#items.delete(name);
  }
}

// webStorage returns globalThis[name], or null where it does not exist or
// may not be used (Node; a sandboxed frame or blocked cookies throw).
function webStorage(name) {
  try {
    return globalThis[name] ?? null;
  } catch {
    return null;
  }
}

function resolveStorage(storage = "session") {
  if (storage && typeof storage === "object") return storage;
  if (storage === "session") return webStorage("sessionStorage") ?? new MemoryStorage();
  if (storage === "local") return webStorage("localStorage") ?? new MemoryStorage();
  if (storage === "memory") return new MemoryStorage();
  throw new TypeError(`storage must be "session", "local", "memory" or a Storage-like object, got ${storage}`);
}

/** parseRetryAfter reads Retry-After (delta-seconds or an HTTP-date) in milliseconds, or null. */
export function parseRetryAfter(value, now = Date.now()) {
  if (value == null) return null;
  const v = String(value).trim();
  if (/^\d+$/.test(v)) return Math.min(Number(v), 86400) * 1000;
  // Every HTTP-date form starts with the day's name; Date.parse alone would
  // also read "-5" or "1.5" as dates long past, a retry without waiting.
  if (!/^[A-Za-z]{3,9},?\s/.test(v)) return null;
  // The asctime form has no zone, and is GMT (RFC 9110 section 5.6.7):
  // Date.parse would read it in local time.
  const asctime = /^[A-Za-z]{3} [A-Za-z]{3} [ \d]\d \d\d:\d\d:\d\d \d{4}$/.test(v);
  const at = Date.parse(asctime ? `${v} GMT` : v);
  // At most a day, as delta-seconds are: setTimeout fires at once past 2^31 ms.
  return Number.isNaN(at) ? null : Math.min(Math.max(0, at - now), 86400 * 1000);
}

function sleep(ms, signal) {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const timer = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    function onAbort() {
      clearTimeout(timer);
      reject(signal.reason);
    }
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}

async function readProblem(response) {
  const type = response.headers.get("Content-Type") || "";
  if (!/^application\/problem\+json\b/i.test(type)) return null;
  try {
    const p = await response.clone().json();
    return p && typeof p === "object" ? p : null;
  } catch {
    return null;
  }
}

// RESEND marks what #follow returns for a poll answered released: the
// request's own answer, to retry by sending the request again.
const RESEND = Symbol("resend");

/** Polls of one status URL under respondAsync: ten minutes at the proxy's Retry-After of 1 s. */
export const DEFAULT_MAX_POLLS = 600;

// Headers of the request that a poll of its status URL does not carry: it
// is a GET without a body, and the key and preference were the request's.
const NOT_POLLED = ["Content-Type", "Content-Length", "Content-Encoding", "Prefer", "Idempotency-Key"];

// accepted tells the proxy's 202 under Prefer: respond-async, to a request
// for requested: the operation runs, and Location says where its answer will
// be. The proxy serves its status URLs on the origin the request was sent
// to; a Location on another origin (a redirect's included) is not one of
// them, and polling it would hand the request's headers (Authorization) to
// that origin.
function accepted(response, requested) {
  const location = response.headers.get("Location");
  return response.status === 202 && !!location && sameOrigin(location, response.url || requested, requested) &&
    /respond-async/i.test(response.headers.get("Preference-Applied") || "");
}

// sameOrigin tells whether location, resolved against base, is on
// requested's origin; a relative one in a page resolves against the page.
function sameOrigin(location, base, requested) {
  try {
    const page = globalThis.location?.href;
    return new URL(location, new URL(base, page)).origin === new URL(requested, page).origin;
  } catch {
    return false;
  }
}

// statusURL resolves Location against the request's URL; a relative one in
// a page is left for fetch to resolve against the page.
function statusURL(location, base) {
  try {
    return new URL(location, base).href;
  } catch {
    return location;
  }
}

// rejected runs release and rethrows: for a judged answer that ends the
// operation with an error, whose body nobody reads.
function rejected(release) {
  return (err) => {
    release();
    throw err;
  };
}

function isTrue(v) {
  return (v || "").trim().toLowerCase() === "true";
}

/**
 * Client sends requests as idempotent operations.
 *
 *   const client = new IdempotentClient();
 *   const { response, replayed } = await client.request("/v1/charges", {
 *     method: "POST", json: { order: 42 }, operation: "charge:order-42" });
 */
export class IdempotentClient {
  #inflight = new Map();

  /**
   * @param {object} [options]
   * @param {number} [options.maxAttempts=5] requests one operation may send
   * @param {number} [options.baseDelay=100] backoff before the second attempt, ms; doubles each retry
   * @param {number} [options.maxDelay=10000] cap of every wait, Retry-After included, ms
   * @param {number} [options.attemptTimeout=30000] bound of one attempt until its headers, ms (0: none)
   * @param {"session"|"local"|"memory"|Storage} [options.storage="session"] where named operations keep their key
   * @param {typeof fetch} [options.fetch] the fetch to use (default globalThis.fetch)
   * @param {(retry: object) => void} [options.onRetry] called before each wait between attempts or polls
   * @param {boolean} [options.respondAsync=false] send Prefer: respond-async and follow the 202's status URL to the answer
   * @param {number} [options.maxPolls=600] polls of one status URL under respondAsync
   * @param {(ms: number, signal?: AbortSignal) => Promise<void>} [options.sleep] waits between attempts and polls (a test seam)
   */
  constructor(options = {}) {
    this.maxAttempts = options.maxAttempts ?? 5;
    this.baseDelay = options.baseDelay ?? 100;
    this.maxDelay = options.maxDelay ?? 10_000;
    this.attemptTimeout = options.attemptTimeout ?? 30_000;
    this.storage = resolveStorage(options.storage);
    this.fetch = options.fetch ?? ((...args) => globalThis.fetch(...args));
    this.onRetry = options.onRetry;
    this.respondAsync = options.respondAsync ?? false;
    this.maxPolls = options.maxPolls ?? DEFAULT_MAX_POLLS;
    this.sleep = options.sleep ?? sleep;
  }

  /** pending returns the key an unfinished operation of this name keeps, or null. */
  pending(operation) {
    const raw = this.storage.getItem(STORAGE_PREFIX + operation);
    if (!raw) return null;
    try {
      return JSON.parse(raw).key ?? null;
    } catch {
      return null;
    }
  }

  /** forget drops the key an operation keeps, so its next call is a new operation. */
  forget(operation) {
    this.storage.removeItem(STORAGE_PREFIX + operation);
  }

  /**
   * request sends one logical operation, retrying it with the same key.
   * init is fetch's, plus: operation (a name whose key is kept until a final
   * answer; concurrent calls with one name are one operation), key (an
   * explicit key; an Idempotency-Key in headers is one too), json (a value
   * sent as the JSON body). The body must be
   * replayable: a string, ArrayBuffer, typed array, Blob, URLSearchParams or
   * FormData.
   * @returns {Promise<{response: Response, status: number, replayed: boolean, bodyOmitted: boolean, key: string, attempts: number}>}
   */
  request(url, init = {}) {
    const { operation } = init;
    if (operation == null) return this.#run(url, init);
    const running = this.#inflight.get(operation);
    if (running) return running;
    const p = this.#run(url, init).finally(() => this.#inflight.delete(operation));
    this.#inflight.set(operation, p);
    return p;
  }

  #keyFor(init) {
    if (init.key) return init.key;
    // A key the caller put in the headers names the operation, as in the Go
    // client: replacing it would make each call a new operation.
    const given = new Headers(init.headers).get("Idempotency-Key");
    if (given) return given;
    if (init.operation == null) return newKey();
    const slot = STORAGE_PREFIX + init.operation;
    const kept = this.pending(init.operation);
    if (kept) return kept;
    const key = newKey();
    // Stored before the first attempt: a reload from here on resumes it.
    this.storage.setItem(slot, JSON.stringify({ key, created: new Date().toISOString() }));
    return key;
  }

  async #run(url, init) {
    const { operation, key: _key, json, signal, ...rest } = init;
    const headers = new Headers(rest.headers);
    if (this.respondAsync) headers.append("Prefer", "respond-async");
    let body = rest.body;
    if (json !== undefined) {
      body = JSON.stringify(json);
      if (!headers.has("Content-Type")) headers.set("Content-Type", "application/json");
    }
    if (body != null && typeof body.getReader === "function") {
      throw new TypeError("request: a ReadableStream body cannot be resent; pass a string, ArrayBuffer or Blob");
    }
    if (typeof FormData !== "undefined" && body instanceof FormData) {
      // fetch encodes a FormData with a new multipart boundary each time:
      // encoded once, every attempt sends the bytes the key was first sent with.
      const encoded = new Response(body);
      if (!headers.has("Content-Type")) headers.set("Content-Type", encoded.headers.get("Content-Type"));
      body = await encoded.arrayBuffer();
    }
    // Kept only once the request can be sent: a body refused above leaves
    // no pending operation for a reloaded page to resume.
    const key = this.#keyFor(init);
    headers.set("Idempotency-Key", key);
    const op = { operation, key, signal };
    let last = { status: 0, problem: null, error: null, retryAfter: null };
    for (let attempt = 1; ; attempt++) {
      const { response, error, release } = await this.#send(url, { ...rest, headers, body }, op, attempt, last);
      if (response) {
        if (this.respondAsync && accepted(response, String(url))) {
          release();
          await response.body?.cancel().catch(() => {});
          const followed = await this.#follow(statusURL(response.headers.get("Location"), response.url || String(url)), headers, op, attempt, response);
          if (!followed[RESEND]) return followed;
          // The key was released: the poll answered what this attempt
          // would have been told, and the request is sent again.
          last = followed[RESEND];
        } else {
          last = await this.#judge(response, op, attempt).catch(rejected(release));
          // The signal goes on aborting a returned response's body, as
          // it does fetch's own.
          if (last.result) return last.result;
          release();
        }
      } else {
        last = { status: 0, problem: null, error, retryAfter: null };
      }
      if (attempt >= this.maxAttempts) throw this.#gaveUp(`gave up after ${attempt} attempt(s)`, op, attempt, last);
      await this.#wait(attempt, last, op, `after ${attempt} attempt(s)`);
    }
  }

  // #follow GETs the status URL of a 202 until the operation's answer, after
  // each 202's Retry-After (capped by maxDelay), with the request's headers:
  // the proxy answers only a poll that carries the original's scope headers
  // (Authorization, ...). A poll that fails in a way worth retrying is
  // retried the same way. At most maxPolls polls are sent. An answer marked
  // Idempotent-Released that says to retry is returned under RESEND: the
  // key is free, and #run sends the request again with it.
  async #follow(location, requestHeaders, op, attempts, response) {
    const headers = new Headers(requestHeaders);
    for (const h of NOT_POLLED) headers.delete(h);
    let last = { status: 202, problem: null, error: null, retryAfter: parseRetryAfter(response.headers.get("Retry-After")) };
    for (let poll = 1; ; poll++) {
      await this.#wait(poll, last, op, `after ${poll - 1} poll(s) of ${location}`);
      const { response: answer, error, release } = await this.#send(location, { method: "GET", headers }, op, poll, last);
      if (!answer) {
        last = { status: 0, problem: null, error, retryAfter: null };
      } else if (accepted(answer, location)) {
        release();
        await answer.body?.cancel().catch(() => {});
        last = { status: 202, problem: null, error: null, retryAfter: parseRetryAfter(answer.headers.get("Retry-After")) };
      } else {
        const released = isTrue(answer.headers.get("Idempotent-Released"));
        last = await this.#judge(answer, op, attempts).catch(rejected(release));
        if (last.result) return { ...last.result, polls: poll };
        release();
        if (released) return { [RESEND]: last };
      }
      if (poll >= this.maxPolls) throw this.#gaveUp(`gave up after ${poll} poll(s) of ${location}`, op, poll, last);
    }
  }

  // #send makes one request, bounded by attemptTimeout and the operation's
  // signal: { response }, or { error } after a network error or a timeout.
  // The signal still aborts the response's body until release is called:
  // #judge reads a problem's body, which may stall like any read, and the
  // caller reads a returned response's, which is never released.
  async #send(url, init, op, attempt, last) {
    const { signal } = op;
    const ctrl = new AbortController();
    const onAbort = () => ctrl.abort(signal.reason);
    signal?.addEventListener("abort", onAbort, { once: true });
    if (signal?.aborted) ctrl.abort(signal.reason);
    const timer = this.attemptTimeout > 0 ? setTimeout(() => ctrl.abort(new DOMException("attempt timed out", "TimeoutError")), this.attemptTimeout) : null;
    let response = null;
    let error = null;
    try {
      // A redirect is the operation's answer (redirect: "manual"), unless
      // the caller asked fetch for another: followed, it would carry the
      // key and the body to another URL — behind the proxy a different
      // request under the same key (422 payload-mismatch, though the
      // operation ran), on another origin an execution the proxy never sees.
      response = await this.fetch(url, { redirect: "manual", ...init, signal: ctrl.signal });
    } catch (e) {
      error = e;
    } finally {
      clearTimeout(timer);
    }
    const release = () => signal?.removeEventListener("abort", onAbort);
    if (!response) release();
    if (signal?.aborted) {
      release();
      throw this.#gaveUp(`operation aborted after ${attempt} attempt(s)`, op, attempt, error ? { status: 0, problem: null, error } : last, signal.reason);
    }
    return { response, error, release };
  }

  // #judge decides an answer as the contract says: a result to return, an
  // error thrown, or what to retry.
  async #judge(response, op, attempt) {
    const { operation, key, signal } = op;
    const replayed = isTrue(response.headers.get("Idempotent-Replayed"));
    const problem = response.status >= 400 && !replayed ? await readProblem(response) : null;
    if (signal?.aborted) {
      await response.body?.cancel().catch(() => {});
      throw this.#gaveUp(`operation aborted after ${attempt} attempt(s)`, op, attempt, { status: response.status, problem, error: null }, signal.reason);
    }
    const action = decide(response.status, problem?.type, replayed);
    if (action === "done") {
      if (operation != null) this.forget(operation);
      return { result: { response, status: response.status, replayed, bodyOmitted: isTrue(response.headers.get("Idempotent-Body-Omitted")), key, attempts: attempt } };
    }
    await response.body?.cancel().catch(() => {});
    if (action === "stop") {
      if (operation != null) this.forget(operation);
      const opts = { key, attempts: attempt, status: response.status, problem };
      const name = problem.type.slice(PROBLEM_BASE.length);
      const msg = `proxy answered ${response.status} ${name} (key ${key})${problem.detail ? ": " + problem.detail : ""}`;
      if (name === "payload-mismatch") throw new PayloadMismatchError(msg, opts);
      if (name === "key-expired") throw new KeyExpiredError(msg, opts);
      throw new ProblemError(msg, opts);
    }
    return { status: response.status, problem, error: null, retryAfter: parseRetryAfter(response.headers.get("Retry-After")) };
  }

  // #wait sleeps before the next attempt or poll: the last answer's
  // Retry-After capped by maxDelay, else backoff with full jitter.
  async #wait(n, last, op, when) {
    const delay = last.retryAfter != null ? Math.min(last.retryAfter, this.maxDelay) : Math.random() * Math.min(this.maxDelay, this.baseDelay * 2 ** (n - 1));
    this.onRetry?.({ attempt: n, delay, status: last.status, problem: last.problem, error: last.error, key: op.key });
    try {
      await this.sleep(delay, op.signal);
    } catch (reason) {
      throw this.#gaveUp(`operation aborted ${when}`, op, n, last, reason);
    }
  }

  // #gaveUp is the error when the attempts or polls run out (cause: the
  // last network error) or the signal aborts (cause: its reason).
  #gaveUp(what, { key }, attempts, last, reason) {
    const cause = reason ?? last.error ?? undefined;
    const why = reason !== undefined ? "" : last.error ? `, ${String(last.error?.message ?? last.error)}` : `, last status ${last.status}${last.problem?.type ? " (" + last.problem.type + ")" : ""}`;
    return new GaveUpError(`${what}${why}; key ${key} is kept`, { key, attempts, status: last.status, problem: last.problem, cause });
  }
}
