package server_test

import (
	"context"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/server"
	"github.com/captchaq/captchaq/sim"
)

// In front of a fleet, an expired token is withheld and the same task
// POSTed again is solved again under the same id, as with the local queue.
func TestGatewaySolvesAnExpiredTaskAgain(t *testing.T) {
	t.Parallel()
	f := newFleetRig(t, sim.Config{LatencyScale: 0.005, PollBan: sim.PollBan{Disabled: true}})
	f.worker("renew-w", 4)
	b := f.serve("renew", filepath.Join(t.TempDir(), "gw.db"), nil)

	b.api(t, "POST", "/v1/tasks", keyQA, apiTurnstile("a"), http.StatusAccepted, nil)
	first := b.waitFinal(t, keyQA, "a")
	if first.Status != captchaq.StatusSolved || first.Result.Token == "" {
		t.Fatalf("a: %+v", first)
	}
	expire(t, b.store, "qa/a")
	var v server.TaskView
	b.api(t, "GET", "/v1/tasks/a", keyQA, "", http.StatusOK, &v)
	if !v.Expired || v.Result == nil || v.Result.Token != "" {
		t.Fatalf("GET of an expired result: %+v", v)
	}
	var again created
	b.api(t, "POST", "/v1/tasks", keyQA, apiTurnstile("a"), http.StatusAccepted, &again)
	if again.Tasks[0].Existed {
		t.Fatalf("an expired task was answered as it was: %+v", again.Tasks[0])
	}
	solved := b.waitFinal(t, keyQA, "a")
	if solved.Status != captchaq.StatusSolved || solved.Expired || solved.Result.Token == "" || solved.Result.Token == first.Result.Token {
		t.Fatalf("a solved again: %+v (first token %q)", solved, first.Result.Token)
	}
	if n := f.sim.Stats().Accepted; n != 2 {
		t.Fatalf("the provider accepted %d tasks, want 2", n)
	}
}

// expire makes the stored result of id a second past its expires_at.
func expire(t *testing.T, store captchaq.Store, id string) {
	t.Helper()
	rec, err := store.Get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	dead := *rec.Result
	dead.ExpiresAt = time.Now().Add(-time.Second)
	if err := store.Finish(context.Background(), dead); err != nil {
		t.Fatal(err)
	}
}
