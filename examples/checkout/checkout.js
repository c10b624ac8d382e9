// The checkout page: one charge per order, whatever the user does. The
// browser client keeps the operation's key in sessionStorage from before
// the first attempt until a final answer, so a reload resumes the charge
// with the same key, and a second click joins the first instead of
// starting another.
import { IdempotentClient, IdempotencyError } from "../../clients/js/idempotency.js";

const order = new URLSearchParams(location.search).get("order") || "42";
const operation = `checkout:order-${order}`;
const $ = (id) => document.getElementById(id);
$("order").textContent = order;

const client = new IdempotentClient({
  storage: "session",
  maxAttempts: 10,
  maxDelay: 1000,
  onRetry: ({ attempt, status, error, delay }) => {
    const why = status ? `answer ${status}` : `network: ${error?.message ?? error}`;
    $("status").textContent = `Retrying with the same key (attempt ${attempt} failed, ${why}; next in ${Math.round(delay)} ms)…`;
  },
});

async function pay() {
  $("status").textContent = "Paying…";
  try {
    const { response, replayed, key } = await client.request(`/v1/charges?order=${encodeURIComponent(order)}`, {
      method: "POST",
      json: { order, amount: 4200, currency: "EUR" }, // the same bytes on every attempt and after a reload
      operation,
    });
    $("key").textContent = key;
    const charge = await response.json();
    $("status").textContent = "";
    $("result").hidden = false;
    $("result").className = replayed ? "replayed" : "";
    $("result").dataset.execution = charge.execution;
    $("result").textContent = `Charged: execution #${charge.execution} at ${charge.time}`;
    $("pay").disabled = true; // the order is paid: a new click would be a new charge
  } catch (err) {
    if (!(err instanceof IdempotencyError)) throw err;
    // Gave up for now: the key stays kept, the next click resumes the same charge.
    $("status").textContent = `Not confirmed yet (${err.message}). Pay again to resume the same charge.`;
  }
}

$("pay").addEventListener("click", () => {
  // No disabling here: the client itself makes a second click part of the first.
  $("key").textContent = client.pending(operation) ?? "new";
  pay();
  $("key").textContent = client.pending(operation);
});

// A charge left unfinished by a reload resumes at once, with its kept key.
const kept = client.pending(operation);
if (kept) {
  $("key").textContent = kept;
  $("status").textContent = "Resuming your payment…";
  pay();
}
