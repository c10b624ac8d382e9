package client_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/idempotency-proxy/idempotency-proxy/client"
)

func Example() {
	// An API behind idempotency-proxy; here a stand-in that checks the key.
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get(client.HeaderKey) == "" {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		w.WriteHeader(http.StatusCreated)
	}))
	defer api.Close()
	ctx := context.Background()
	req, _ := http.NewRequest(http.MethodPost, api.URL+"/v1/charges", strings.NewReader(`{"amount":100}`))

	c := &client.Client{}
	resp, err := c.Do(ctx, req) // one key, same key on every retry
	if err != nil {
		log.Fatal(err)
	}
	defer resp.Body.Close()
	fmt.Println(resp.Status, "replayed:", client.Replayed(resp))
	// Output: 201 Created replayed: false
}

// A key derived from the caller's own order id survives a restart: the
// resumed process sends the same key and gets the first execution's answer.
func ExampleKeyFor() {
	key := client.KeyFor("https://shop.example/orders", "order-42")
	ctx := client.WithKey(context.Background(), key)
	_ = ctx // pass to Client.Do
	fmt.Println(key)
	// Output: d033dee1-c906-5d22-b5cb-5121b582bedc
}

func ExampleMismatchError() {
	var err error = &client.MismatchError{Key: "k1"}
	if errors.Is(err, client.ErrKeyReused) {
		fmt.Println("bug: key reused for a different request")
	}
	// Output: bug: key reused for a different request
}
