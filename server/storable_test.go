package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/amqp"
	"github.com/captchaq/captchaq/internal/pgtest"
	"github.com/captchaq/captchaq/internal/testbound"
	"github.com/captchaq/captchaq/server"
	"github.com/captchaq/captchaq/sim"
	"github.com/captchaq/captchaq/store/postgres"
	"github.com/captchaq/captchaq/store/sqlite"
)

// TestGatewayRefusesUnstorableBeforePublish: a gateway on PostgreSQL (as
// serve --amqp --store postgres://...) given 30 times the id "n1\u0000",
// 30 times a proxy holding a NUL on /v1/tasks and 30 times a proxy param
// holding one on in.php refuses each (400 naming the field; in.php's
// ERROR_BAD_PARAMETERS) before it publishes: the simulator accepts
// exactly the two valid tasks around them, solved by a worker of one
// thread that takes the queue in order, and the gateway counts two
// accepted, two results and nothing dropped. Before, each was published,
// submitted and paid for, then refused by the store.
func TestGatewayRefusesUnstorableBeforePublish(t *testing.T) {
	t.Parallel()
	f := newFleetRig(t, sim.Config{Threads: 5, LatencyScale: 0.01, Seed: 21, PollBan: sim.PollBan{Disabled: true}})
	f.worker("storable-w", 1)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := postgres.Open(ctx, pgtest.NewDatabase(t), postgres.Config{Retention: postgres.RetentionOff, Logger: f.log})
	if err != nil {
		t.Fatal(err)
	}
	g := f.serveStore("storable-gw", st, nil)

	solve := func(id string) {
		t.Helper()
		g.api(t, "POST", "/v1/tasks", keyQA, apiTurnstileOwn(id), http.StatusAccepted, nil)
		if v := g.waitFinal(t, keyQA, id); v.Status != captchaq.StatusSolved {
			t.Fatalf("%s: %+v, want solved", id, v)
		}
	}
	solve("before")
	before := f.sim.Stats().Accepted
	var inAccepted []string
	for range 30 {
		g.apiRefuses(t, `{"id":"n1\u0000","method":"turnstile","params":{"sitekey":"0x4AAAAAAA","pageurl":"https://shop.example/checkout"}}`,
			"id", "id: holds a NUL byte")
		g.apiRefuses(t, `{"id":"p1","method":"turnstile","params":{"sitekey":"0x4AAAAAAA","pageurl":"https://shop.example/checkout"},`+
			`"proxy":"user:pa\u0000ss@10.0.0.1:3128","proxytype":"HTTP"}`, "proxy", "proxy: holds a NUL byte")
		v := turnstile()
		v.Set("key", keyQA)
		v.Set("proxy", "user:pa\x00ss@10.0.0.1:3128")
		v.Set("proxytype", "HTTP")
		if got := g.form(t, "POST", "/in.php", v); got != "ERROR_BAD_PARAMETERS" {
			inAccepted = append(inAccepted, got)
		}
	}
	if len(inAccepted) != 0 {
		t.Errorf("in.php with a NUL in proxy answered %q, want ERROR_BAD_PARAMETERS each time", inAccepted)
	}
	// The worker takes the queue in order on its one thread: what was
	// published before "after" was submitted before it.
	solve("after")
	if got := f.sim.Stats().Accepted; got != before+1 {
		t.Errorf("simulator accepted %d tasks after the first %d, want 1 (\"after\"): refused tasks were submitted", got-before, before)
	}
	if c := g.gw.Counts(); c != (amqp.GatewayCounts{Accepted: 2, Results: 2}) {
		t.Errorf("gateway counts %+v, want 2 accepted and results, nothing else", c)
	}
}

// failingEnqueue is a gateway's store whose Enqueue fails while fail is
// set, as a closed store does: the gateway's write after a publish fails
// at once.
type failingEnqueue struct {
	captchaq.Store
	fail atomic.Bool
}

func (s *failingEnqueue) Enqueue(ctx context.Context, tasks []captchaq.Task, now time.Time) ([]captchaq.Record, []bool, error) {
	if s.fail.Load() {
		return nil, nil, fmt.Errorf("test store: %w", captchaq.ErrStoreClosed)
	}
	return s.Store.Enqueue(ctx, tasks, now)
}

// TestGatewayPublishedNotRecorded: when the record's write fails after
// the publish, the gateway keeps the task: the client's next submit of
// u1 writes its record without publishing it again, and u2's result
// writes its record when it comes. Each is solved and paid for once (the
// simulator accepts exactly 2) and both answer solved; before, u1 was
// published twice and u2's result dropped.
func TestGatewayPublishedNotRecorded(t *testing.T) {
	t.Parallel()
	f := newFleetRig(t, sim.Config{Threads: 5, LatencyScale: 0.01, Seed: 22, PollBan: sim.PollBan{Disabled: true}})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sq, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "gateway.db"), sqlite.Config{Logger: f.log})
	if err != nil {
		t.Fatal(err)
	}
	st := &failingEnqueue{Store: sq}
	g := f.serveStore("unrecorded-gw", st, nil)

	st.fail.Store(true)
	for _, id := range []string{"u1", "u2"} {
		var e apiErr
		g.api(t, "POST", "/v1/tasks", keyQA, apiTurnstileOwn(id), http.StatusServiceUnavailable, &e)
	}
	st.fail.Store(false)
	g.api(t, "POST", "/v1/tasks", keyQA, apiTurnstileOwn("u1"), http.StatusAccepted, nil)
	f.worker("unrecorded-w", 1)
	for _, id := range []string{"u1", "u2"} {
		var status int
		var v server.TaskView
		testbound.Until(t, id+" solved", func() bool {
			status, v = g.getTask(t, id)
			return status == http.StatusOK && v.Status == captchaq.StatusSolved
		})
	}
	if s := f.sim.Stats(); s.Accepted != 2 || s.Duplicates != 0 {
		t.Errorf("simulator accepted %d (duplicates %d), want 2 and 0: each task solved once", s.Accepted, s.Duplicates)
	}
	if c := g.gw.Counts(); c != (amqp.GatewayCounts{Accepted: 2, Results: 2, Unrecorded: 2}) {
		t.Errorf("gateway counts %+v, want 2 unrecorded, then accepted and answered", c)
	}
}

// getTask reads GET /v1/tasks/{id} with keyQA: the status and, on 200,
// the task.
func (b *bundle) getTask(t *testing.T, id string) (int, server.TaskView) {
	t.Helper()
	req := mustRequest(t, http.MethodGet, b.url+"/v1/tasks/"+id)
	req.Header.Set("Authorization", "Bearer "+keyQA)
	resp, err := b.http.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var v server.TaskView
	if resp.StatusCode == http.StatusOK {
		if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
			t.Fatal(err)
		}
	}
	return resp.StatusCode, v
}
