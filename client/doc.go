// Package client makes "at least once" safe end to end for callers of an API
// behind idempotency-proxy (or any server that honours the Idempotency-Key
// header the same way).
//
// The common case is two lines:
//
//	c := &client.Client{}               // zero value: http.DefaultClient, 5 attempts
//	resp, err := c.Do(ctx, req)         // one call per logical operation
//
// # Retry contract
//
// One call to [Client.Do] is one logical operation and carries one key:
//
//   - The key is the request's Idempotency-Key header if the caller set one,
//     else the key attached to ctx with [WithKey], else a fresh random UUIDv4
//     ([NewKey]). Every attempt sends the same key, so the server executes the
//     operation at most once however many attempts reach it. A caller that may
//     resume an operation after a restart derives the key from its own
//     operation id with [KeyFor], or persists the key before the first call.
//   - What the client does with each answer is clients/contract.json, the
//     table docs/clients.md shows and the JavaScript and Python clients share.
//     Retried, with the same key: transport errors and per-attempt timeouts
//     (the response may have been lost on the way back; the retry gets the
//     recorded replay); the proxy's in-flight (409), store-unavailable and
//     store-full (503), upstream-unreachable and upstream-failed (502) and
//     upstream-timeout (504); and, from anyone else, 408, 409, 425, 429, 502,
//     503 and 504 (408, 425, 429 and 503 are the statuses the proxy releases
//     the key on by default: not processed). Retry-After is honoured in both delta-seconds and HTTP-date form,
//     capped by MaxDelay.
//   - Never retried: a response carrying "Idempotent-Replayed: true" (it is the
//     recorded answer; asking again cannot change it), and every other status
//     (the proxy records them: a retry would only replay them).
//   - The proxy's answers that no retry can change are errors, never
//     responses: 422 payload-mismatch is a [*MismatchError]
//     (errors.Is(err, [ErrKeyReused]) holds), a bug in the caller; every
//     other (a missing or invalid key, a body too large or ambiguous, 410
//     key-expired with errors.Is(err, [ErrKeyExpired]), a record that cannot
//     be read) is a [*ProblemError]. An upstream's own 4xx or 5xx, with a
//     problem type of its own or none, is returned as a response.
//   - Between attempts the client waits with exponential backoff and full
//     jitter: a random delay in [0, min(MaxDelay, BaseDelay·2^(n-1))), or the
//     server's Retry-After when it sent one. ctx bounds the whole operation,
//     waits included. [Client.OnRetry] sees each retry and its delay.
//   - When it gives up — attempts exhausted, or ctx done — Do returns a
//     [*RetryError] with the number of attempts, the last status or transport
//     error, and the key; it wraps the cause, so errors.Is(err,
//     context.DeadlineExceeded) works.
//
// # Request bodies
//
// Every attempt needs the whole body again. Requests built by
// http.NewRequest from a *bytes.Buffer, *bytes.Reader or *strings.Reader have
// req.GetBody and are replayed from it. Any other body is read once into
// memory, up to MaxBufferedBody (10 MiB by default, the proxy's default
// max_request_body); a larger body fails with [ErrBodyTooLarge] before anything
// is sent, because a body that cannot be replayed cannot be retried safely.
//
// # Responses
//
// [Replayed] tells whether the final response is a replay of an earlier
// execution, [BodyOmitted] whether the replay carries no body because the
// original was too large to record. Bodies of retried responses are drained
// (up to a bound) and closed by the client; the body of the returned response
// is the caller's to close.
package client
