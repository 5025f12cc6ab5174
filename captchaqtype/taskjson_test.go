package captchaqtype

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestParseTask(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		line string
		want Task
	}{
		{"seed line", `{"id":"checkout-1","method":"turnstile","params":{"sitekey":"0x4AAA","pageurl":"https://shop.example/checkout"},"priority":1}`,
			Task{ID: "checkout-1", Method: "turnstile", Priority: 1, Params: map[string]string{"sitekey": "0x4AAA", "pageurl": "https://shop.example/checkout"}}},
		{"numbers and bools in params", `{"id":"a","method":"userrecaptcha","params":{"invisible":true,"enterprise":false,"min_score":0.3,"n":12}}`,
			Task{ID: "a", Method: "userrecaptcha", Params: map[string]string{"invisible": "1", "enterprise": "0", "min_score": "0.3", "n": "12"}}},
		{"ttl duration", `{"id":"a","method":"turnstile","ttl":"90s"}`, Task{ID: "a", Method: "turnstile", TTL: 90 * time.Second}},
		{"ttl seconds", `{"id":"a","method":"turnstile","ttl":2.5}`, Task{ID: "a", Method: "turnstile", TTL: 2500 * time.Millisecond}},
		{"deadline and queue fields", `{"id":"a","method":"turnstile","deadline":"2026-01-02T15:04:05Z","tenant":"t1","max_attempts":2,"proxy":"u:p@h:1","proxytype":"HTTP","pingback":"https://x.example/cb"}`,
			Task{ID: "a", Method: "turnstile", Deadline: time.Date(2026, 1, 2, 15, 4, 5, 0, time.UTC), Tenant: "t1", MaxAttempts: 2, Proxy: "u:p@h:1", ProxyType: "HTTP", Pingback: "https://x.example/cb"}},
		{"nulls ignored", `{"id":"a","method":"turnstile","params":null,"ttl":null}`, Task{ID: "a", Method: "turnstile"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := ParseTask([]byte(tc.line))
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Fatalf("(-want +got)\n%s", d)
			}
		})
	}
}

func TestParseTaskErrorsNameTheField(t *testing.T) {
	t.Parallel()
	tests := []struct {
		line, want string
	}{
		{`{"method":"turnstile"}`, "id: required"},
		{`{"id":"a"}`, "method: required"},
		{`{"id":"a","method":"turnstile","sitekey":"x"}`, `unknown field "sitekey"`},
		{`{"id":"a","method":"turnstile","ttl":"soon"}`, `ttl: use a duration`},
		{`{"id":"a","method":"turnstile","ttl":-1}`, `ttl: must be a positive number of seconds`},
		{`{"id":"a","method":"turnstile","deadline":"tomorrow"}`, `deadline: "tomorrow" is not RFC 3339`},
		{`{"id":"a","method":"turnstile","params":{"x":[1]}}`, `params.x: must be a string, number or boolean`},
		{`{"id":"a","method":"turnstile","priority":"high"}`, `priority: must be a whole number`},
		{`{"id":"a","method":"turnstile","priority":-1}`, `priority: must be 0 or more`},
		{`{"id":7,"method":"turnstile"}`, `id: must be a string`},
		{`{"id":"a","method":"turnstile","ttl":"5s","deadline":"2026-01-02T15:04:05Z"}`, `deadline, ttl: set one or the other`},
		{`{"id":"a",`, `invalid JSON`},
	}
	for _, tc := range tests {
		// What JSON cannot carry ParseTask refuses; the rest the door's
		// validation does (ParseTask does not validate).
		task, err := ParseTask([]byte(tc.line))
		if err == nil {
			err = task.check()
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseTask(%s) then check = %v, want an error containing %q", tc.line, err, tc.want)
		}
	}
	task, err := ParseTask([]byte(`{"id":"a"}`))
	if err != nil {
		t.Fatalf("ParseTask validated: %v", err)
	}
	if err := task.Validate(); !errors.Is(err, ErrInvalidTask) {
		t.Errorf("missing method: %v does not match ErrInvalidTask", err)
	}
}
