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
//   - Retried, with the same key: transport errors and per-attempt timeouts
//     (the response may have been lost on the way back; the retry gets the
//     recorded replay), 409 (the first attempt is still in flight), 429 and
//     503 (not processed; Retry-After is honoured in both delta-seconds and
//     HTTP-date form, capped by MaxDelay), 502 and 504 (the proxy could not
//     get an answer from the upstream).
//   - Never retried: a response carrying "Idempotent-Replayed: true" (it is the
//     recorded answer; asking again cannot change it), every other 4xx, and
//     every other 5xx (the proxy records them: a retry would only replay them).
//   - A 422 whose problem+json type is [ProblemPayloadMismatch] means the key
//     was already used with a different payload: a bug in the caller, returned
//     as a [*MismatchError] (errors.Is(err, [ErrKeyReused]) holds), never
//     retried. Any other 422 is the upstream's own answer and is returned as a
//     response.
//   - Between attempts the client waits with exponential backoff and full
//     jitter: a random delay in [0, min(MaxDelay, BaseDelay·2^(n-1))), or the
//     server's Retry-After when it sent one. ctx bounds the whole operation,
//     waits included.
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
