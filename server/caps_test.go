package server_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"

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

func TestAPIIntakeCaps(t *testing.T) {
	t.Parallel()
	b := setup(t, options{
		clients: []server.Client{{Name: "qa", Key: keyQA}, {Name: "other", Key: keyOther}, {Name: "capped", Key: "capped-key-01", MaxInflight: 1}},
		server: func(c *server.Config) {
			c.MaxTasksPerRequest = 3
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
