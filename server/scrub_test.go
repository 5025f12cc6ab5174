package server_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/server"
)

// storeLeak is what a SQLite store's errors look like: they name the
// file.
const storeLeak = "store /srv/captchaq/secret-dir/captchaq-serve.db: disk I/O error"

// leakyStore fails Replay, and every Get of one id after its first, with
// an error that names the store's file.
type leakyStore struct {
	captchaq.Store
	failID string
	mu     sync.Mutex
	gets   int
}

func (s *leakyStore) Get(ctx context.Context, id string) (captchaq.Record, error) {
	if id == s.failID {
		s.mu.Lock()
		s.gets++
		n := s.gets
		s.mu.Unlock()
		if n > 1 {
			return captchaq.Record{}, errors.New(storeLeak)
		}
	}
	return s.Store.Get(ctx, id)
}

func (s *leakyStore) Replay(context.Context, captchaq.DeadLetterFilter, time.Time) (int, error) {
	return 0, errors.New(storeLeak)
}

// The store's errors reach no client: replay's 500 and cancel's answer
// say what failed, not where the operator keeps the file.
func TestStoreErrorsAreScrubbed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	mem := captchaq.NewMemoryStore(captchaq.MemoryStoreConfig{})
	dead := captchaq.Task{ID: "qa/dead", Tenant: "qa", Method: "turnstile", Params: map[string]string{"sitekey": "0x4AAAAAAA", "pageurl": "https://shop.example/checkout"}}
	if _, _, err := mem.Enqueue(ctx, []captchaq.Task{dead}, time.Now()); err != nil {
		t.Fatal(err)
	}
	if err := mem.Finish(ctx, captchaq.Result{ID: "qa/dead", Method: "turnstile", Status: captchaq.StatusFailed, ErrorCode: "ERROR_CAPTCHA_UNSOLVABLE"}); err != nil {
		t.Fatal(err)
	}
	store := &leakyStore{Store: mem, failID: "qa/dead"}
	b := setup(t, options{server: func(c *server.Config) { c.Queue.Store = store }})

	var e apiErr
	b.api(t, "POST", "/v1/deadletters/replay", keyQA, `{"ids":["dead"]}`, http.StatusInternalServerError, &e)
	if strings.Contains(e.Error, "secret-dir") || strings.Contains(e.Error, ".db") || e.Error == "" {
		t.Errorf("replay's 500: %q", e.Error)
	}
	b.api(t, "DELETE", "/v1/tasks/dead", keyQA, "", http.StatusInternalServerError, &e)
	if strings.Contains(e.Error, "secret-dir") || strings.Contains(e.Error, ".db") || e.Error == "" {
		t.Errorf("cancel's answer: %q", e.Error)
	}
}

// /readyz, open to anyone, says the store cannot be read, not where it is.
func TestReadyzNamesNoStoreFile(t *testing.T) {
	t.Parallel()
	store := &leakyStore{Store: captchaq.NewMemoryStore(captchaq.MemoryStoreConfig{}), failID: "\x00readyz"}
	b := setup(t, options{server: func(c *server.Config) { c.Queue.Store = store }})
	b.do(t, mustReq("GET", b.url+"/readyz"), http.StatusOK)
	got := b.do(t, mustReq("GET", b.url+"/readyz"), http.StatusServiceUnavailable)
	if got != "not ready: store: not readable (the cause is in the server's log)" {
		t.Errorf("/readyz: %q", got)
	}
}
