// A GraphQL client request through the proxy, with graphql-http's own
// client: a mutation carrying its key in Shopify's @idempotent directive,
// sent twice, as a client retrying it would. Prints the two results as
// JSON lines. Usage: node client.js URL KEY
const { createClient } = require("graphql-http");

const client = createClient({ url: process.argv[2] });
const query = "mutation Charge($key: String!) { charge(amount: 7) @idempotent(key: $key) { id amount } }";

function send() {
  return new Promise((resolve, reject) => {
    let result;
    client.subscribe({ query, variables: { key: process.argv[3] } }, {
      next: (r) => { result = r; },
      error: reject,
      complete: () => resolve(result),
    });
  });
}

(async () => {
  for (let i = 0; i < 2; i++) {
    console.log(JSON.stringify(await send()));
  }
})().catch((err) => { console.error(err); process.exit(1); });
