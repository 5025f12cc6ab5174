package server_test

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/captchaq/captchaq/server"
)

func apiRecaptcha(id string) string {
	return `{"id":"` + id + `","method":"userrecaptcha","params":{"googlekey":"6Le-wvkSAAAAAPBMRTvw0Q4Muexq9bi0DJwx_mJ-","pageurl":"https://shop.example/login"}}`
}

// status sends a request with key and returns the HTTP status.
func (b *bundle) status(t *testing.T, method, path, key, body string) int {
	t.Helper()
	req, _ := http.NewRequest(method, b.url+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := b.http.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// until retries f until it is true, for an event the test cannot see
// directly (a request of another goroutine being held by the server).
func until(t *testing.T, what string, f func() bool) {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for !f() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 90s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestAPIIntakeCaps(t *testing.T) {
	t.Parallel()
	b := setup(t, options{
		clients: []server.Client{{Name: "qa", Key: keyQA}, {Name: "other", Key: keyOther}, {Name: "capped", Key: "capped-key-01", MaxInflight: 1}},
		server: func(c *server.Config) {
			c.MaxTasksPerRequest = 3
			c.MaxBodyBytes, c.MaxBodyInflight = 800, 1000
			c.MaxStreamsPerClient, c.MaxStreams = 2, 3
			c.MaxWaitsPerClient, c.MaxWaits = 1, 2
		},
	})
	// Tasks per request: 413, with the limit named.
	var e apiErr
	four := "[" + strings.Join([]string{apiTurnstile("a"), apiTurnstile("b"), apiTurnstile("c"), apiTurnstile("d")}, ",") + "]"
	b.api(t, "POST", "/v1/tasks", keyQA, four, http.StatusRequestEntityTooLarge, &e)
	if !strings.Contains(e.Error, "4 tasks in one request; the server takes at most 3") {
		t.Errorf("tasks per request: %+v", e)
	}

	// A client at its max_inflight is refused before its body is parsed.
	b.api(t, "POST", "/v1/tasks", "capped-key-01", apiRecaptcha("held"), http.StatusAccepted, nil)
	b.api(t, "POST", "/v1/tasks", "capped-key-01", "not json at all", http.StatusTooManyRequests, &e)
	if !strings.Contains(e.Error, "its max_inflight is 1") {
		t.Errorf("max_inflight: %+v", e)
	}

	// Bodies in flight: one held body of 900 bytes leaves no room.
	pr, pw := io.Pipe()
	req, _ := http.NewRequest("POST", b.url+"/v1/tasks", pr)
	req.ContentLength = 900
	req.Header.Set("Authorization", "Bearer "+keyQA)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if resp, err := b.http.Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	pw.Write([]byte("["))
	// The held body reserves 800 (the body cap); 300 more pass 1000.
	padded := strings.Repeat(" ", 296) + "null"
	until(t, "bodies in flight refused", func() bool { return b.status(t, "POST", "/v1/tasks", keyOther, padded) == http.StatusTooManyRequests })
	pw.CloseWithError(io.ErrUnexpectedEOF)
	<-done
	until(t, "room back after the held body", func() bool { return b.status(t, "POST", "/v1/tasks", keyOther, padded) == http.StatusBadRequest })

	// Event streams: two per client, three overall.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	open := func(key string) int {
		req, _ := http.NewRequestWithContext(ctx, "GET", b.url+"/v1/events", nil)
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := b.http.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusOK {
			resp.Body.Close()
		}
		return resp.StatusCode
	}
	for i, want := range []struct {
		key  string
		code int
	}{{keyQA, 200}, {keyQA, 200}, {keyQA, 429}, {keyOther, 200}, {keyOther, 429}} {
		if got := open(want.key); got != want.code {
			t.Errorf("stream %d: HTTP %d, want %d", i, got, want.code)
		}
	}

}

// holdBody starts req with a body that is never finished and returns what
// ends it; the server holds the request while it waits for the rest.
func (b *bundle) holdBody(t *testing.T, req *http.Request, first string) func() {
	t.Helper()
	pr, pw := io.Pipe()
	req.Body, req.ContentLength = pr, 900
	done := make(chan struct{})
	go func() {
		defer close(done)
		if resp, err := b.http.Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	pw.Write([]byte(first))
	var once sync.Once
	release := func() { once.Do(func() { pw.CloseWithError(io.ErrUnexpectedEOF); <-done }) }
	t.Cleanup(release) // before the server's Close, which waits for it
	return release
}

// Bodies sent to in.php and res.php (read before the key in them is
// known) and to the dead-letter replay count against MaxBodyInflight as
// the API's do: a client without a key cannot hold more than it.
func TestFrontAndReplayBodiesCountAgainstBodiesInFlight(t *testing.T) {
	t.Parallel()
	b := setup(t, options{server: func(c *server.Config) { c.MaxBodyBytes, c.MaxBodyInflight = 800, 1000 }})
	front := func() string {
		v := turnstile()
		v.Set("key", keyQA)
		v.Set("pad", strings.Repeat("x", 200))
		return b.form(t, http.MethodPost, "/in.php", v)
	}
	in, _ := http.NewRequest("POST", b.url+"/in.php", nil)
	in.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	release := b.holdBody(t, in, "method=turnstile&")
	until(t, "in.php refused while a keyless body is held", func() bool { return front() == "ERROR_NO_SLOT_AVAILABLE" })
	// Bodies whose key is known before they are read have their own room:
	// the API's, and in.php's with the key in the query string.
	padded := strings.Repeat(" ", 296) + "null"
	if got := b.status(t, "POST", "/v1/tasks", keyOther, padded); got != http.StatusBadRequest {
		t.Errorf("API while a keyless body is held: HTTP %d, want 400 (the body read)", got)
	}
	v := turnstile()
	v.Set("pad", strings.Repeat("x", 200))
	keyed, _ := http.NewRequest(http.MethodPost, b.url+"/in.php?key="+keyQA, strings.NewReader(v.Encode()))
	keyed.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if got := b.do(t, keyed, http.StatusOK); !strings.HasPrefix(got, "OK|") {
		t.Errorf("in.php with the key in the query while a keyless body is held: %q", got)
	}
	if got := b.form(t, http.MethodGet, "/res.php", url.Values{"key": {keyQA}, "action": {"get"}, "id": {"1"}}); got != "ERROR_WRONG_CAPTCHA_ID" {
		t.Errorf("res.php without a body while a body is held: %q", got)
	}
	release()
	until(t, "room back after the held in.php body", func() bool { return strings.HasPrefix(front(), "OK|") })

	replay, _ := http.NewRequest("POST", b.url+"/v1/deadletters/replay", nil)
	replay.Header.Set("Authorization", "Bearer "+keyQA)
	release = b.holdBody(t, replay, `{"ids":[`)
	until(t, "API refused while a replay body is held", func() bool { return b.status(t, "POST", "/v1/tasks", keyOther, padded) == http.StatusTooManyRequests })
	release()
	until(t, "room back after the held replay body", func() bool { return b.status(t, "POST", "/v1/tasks", keyOther, padded) == http.StatusBadRequest })
}
