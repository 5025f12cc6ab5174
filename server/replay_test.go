package server_test

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/server"
)

// gatedStore holds a DeadLetters call that names the id hold until gate
// is closed, and records every DeadLetters filter.
type gatedStore struct {
	captchaq.Store
	hold    string
	entered chan struct{}
	gate    chan struct{}
	mu      sync.Mutex
	filters []captchaq.DeadLetterFilter
}

func (s *gatedStore) DeadLetters(ctx context.Context, f captchaq.DeadLetterFilter, fn func(captchaq.Record) error) error {
	s.mu.Lock()
	s.filters = append(s.filters, f)
	s.mu.Unlock()
	if slices.Contains(f.IDs, s.hold) {
		select {
		case s.entered <- struct{}{}:
		default: // told already
		}
		<-s.gate
	}
	return s.Store.DeadLetters(ctx, f, fn)
}

// deadLetter stores a failed task of client named id.
func deadLetter(t *testing.T, st captchaq.Store, client, id string) {
	t.Helper()
	ctx := context.Background()
	tk := captchaq.Task{ID: client + "/" + id, Tenant: client, Method: "turnstile", Params: map[string]string{"sitekey": "0x4AAAAAAA", "pageurl": "https://shop.example/" + id}}
	if _, _, err := st.Enqueue(ctx, []captchaq.Task{tk}, time.Now()); err != nil {
		t.Fatal(err)
	}
	if err := st.Finish(ctx, captchaq.Result{ID: tk.ID, Method: "turnstile", Status: captchaq.StatusFailed, ErrorCode: "ERROR_CAPTCHA_UNSOLVABLE"}); err != nil {
		t.Fatal(err)
	}
}

// A client has one dead-letter replay running at a time and starts at
// most one per ReplayEvery; another client's replay is not held by it. A
// client's listing asks the Store for its own dead letters only.
func TestReplayOneAtATimePerClient(t *testing.T) {
	t.Parallel()
	mem := captchaq.NewMemoryStore(captchaq.MemoryStoreConfig{})
	for _, d := range [][2]string{{"qa", "hold"}, {"qa", "d2"}, {"other", "o1"}} {
		deadLetter(t, mem, d[0], d[1])
	}
	st := &gatedStore{Store: mem, hold: "qa/hold", entered: make(chan struct{}, 1), gate: make(chan struct{})}
	b := setup(t, options{server: func(c *server.Config) { c.Queue.Store = st; c.ReplayEvery = time.Hour }})
	// A bound for a request held behind the first replay (a replay
	// that waits for another, instead of being refused), not a measure.
	b.http.Timeout = time.Minute
	// The first replay is let go when the test ends early too: the
	// server's close waits for it.
	release := sync.OnceFunc(func() { close(st.gate) })
	t.Cleanup(release)

	first := make(chan int, 1)
	go func() {
		req, _ := http.NewRequest("POST", b.url+"/v1/deadletters/replay", strings.NewReader(`{"ids":["hold"]}`))
		req.Header.Set("Authorization", "Bearer "+keyQA)
		resp, err := b.http.Do(req)
		if err != nil {
			first <- 0
			return
		}
		resp.Body.Close()
		first <- resp.StatusCode
	}()
	<-st.entered // the first replay is running

	var e apiErr
	b.api(t, "POST", "/v1/deadletters/replay", keyQA, `{"ids":["d2"]}`, http.StatusTooManyRequests, &e)
	if e.Error != "a replay of this client is running: wait for its answer" {
		t.Errorf("a second replay while one runs: %q", e.Error)
	}
	var out struct {
		Replayed int      `json:"replayed"`
		IDs      []string `json:"ids"`
	}
	b.api(t, "POST", "/v1/deadletters/replay", keyOther, `{"all":true}`, http.StatusOK, &out)
	if out.Replayed != 1 || !slices.Equal(out.IDs, []string{"o1"}) {
		t.Errorf("another client's replay meanwhile: %+v", out)
	}
	release()
	if code := <-first; code != http.StatusOK {
		t.Fatalf("the first replay: HTTP %d", code)
	}

	h := b.api(t, "POST", "/v1/deadletters/replay", keyQA, `{"ids":["d2"]}`, http.StatusTooManyRequests, &e)
	if !strings.HasPrefix(e.Error, "a client replays at most once per 1h0m0s: try again in ") || h.Get("Retry-After") == "" {
		t.Errorf("a replay right after the last: %q, Retry-After %q", e.Error, h.Get("Retry-After"))
	}

	// The listing of a client asks for that client's dead letters.
	b.api(t, "GET", "/v1/deadletters", keyQA, "", http.StatusOK, nil)
	st.mu.Lock()
	f := st.filters[len(st.filters)-1]
	st.mu.Unlock()
	if !f.All || f.Tenant != "qa" {
		t.Errorf("a client's listing asked the store for %+v, want all of tenant qa", f)
	}
}
