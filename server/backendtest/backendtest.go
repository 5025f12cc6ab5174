// Package backendtest is the conformance suite for server.Backend, as
// storetest is for captchaq.Store. Every implementation (the server's own
// local queue, amqp.Gateway, and any later one) calls Run from its tests:
//
//	func TestBackend(t *testing.T) {
//		backendtest.Run(t, func(t *testing.T, env backendtest.Env) server.Backend {
//			return newBackend(env.Store, env.ProviderURL)
//		})
//	}
//
// Each subtest starts a provider simulator of its own, gives the backend a
// new memory store, then attaches, starts and shuts the backend down as
// server.New and Server.Shutdown do, and checks what the Backend interface
// promises: the errors of each method, idempotent ids, a token solved
// again once it expired, one durable result per task, cancel, dead
// letters and replay, a report recorded once, and a closed backend.
package backendtest

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/provider"
	"github.com/captchaq/captchaq/server"
	"github.com/captchaq/captchaq/sim"
)

// Env is what a backend under test is built on.
type Env struct {
	// ProviderURL is the provider simulator's base URL; any key is valid.
	// The tasks the backend accepts must be solved there.
	ProviderURL string
	// Store is the backend's store (a local queue's Store, a gateway's
	// ledger). The suite reads it and changes results in it (a token made
	// to expire); the backend must not close it.
	Store captchaq.Store
}

// tenant is the client of every task the suite submits; ids are
// "<tenant>/<name>".
const tenant = "qa"

// resultWait bounds the wait for one result: a deadline for a hung
// backend, never a measure of speed.
const resultWait = 2 * time.Minute

// quiet is how long the suite listens for a result that must not come. A
// slow machine makes the check weaker, never wrong.
const quiet = 200 * time.Millisecond

// unsolved is a solve time no subtest waits for.
const unsolved = time.Hour

// refusedCode is the provider's answer to a submit the suite makes it
// refuse: a task error, so the task fails at once and is a dead letter.
const refusedCode = "ERROR_DOMAIN_NOT_ALLOWED"

// Run runs the suite. newBackend must return a new Backend, not attached
// and not started, on env's store, whose tasks are solved at env's
// provider. Run attaches and starts it, and shuts it down when the subtest
// ends; newBackend's own cleanups run after that.
func Run(t *testing.T, newBackend func(t *testing.T, env Env) server.Backend) {
	tests := []struct {
		name string
		sim  func(*simSwitch) sim.Config
		fn   func(t *testing.T, r *rig)
	}{
		{"SubmitDurableAndSolvedOnce", instant, testSubmitSolvedOnce},
		{"KnownIDLeftAsItIs", instant, testKnownID},
		{"IDConflict", slow, testIDConflict},
		{"BadTask", instant, testBadTask},
		{"UnknownIDs", instant, testUnknownIDs},
		{"ExpiredTokenSolvedAgain", instant, testExpired},
		{"CancelUnfinished", slow, testCancelUnfinished},
		{"CancelFinal", instant, testCancelFinal},
		{"DeadLettersAndReplay", refusing, testDeadLetters},
		{"ReportRecordedOnce", refusing, testReportOnce},
		{"Closed", instant, testClosed},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, start(t, tc.sim, newBackend))
		})
	}
}

// simSwitch is what a subtest changes in its simulator while it runs.
type simSwitch struct {
	refuse atomic.Bool // refuse every submit with refusedCode
}

func instant(*simSwitch) sim.Config {
	return sim.Config{Instant: true, Seed: 1, PollBan: sim.PollBan{Disabled: true}}
}

// slow leaves every task unsolved while the subtest runs.
func slow(*simSwitch) sim.Config {
	return sim.Config{Seed: 1, PollBan: sim.PollBan{Disabled: true},
		Latency: map[provider.Kind]sim.Latency{provider.KindTurnstile: {Median: unsolved, Min: unsolved, Max: unsolved}}}
}

// refusing refuses submits while the switch says so.
func refusing(s *simSwitch) sim.Config {
	c := instant(s)
	c.RefuseSubmit = func(map[string]string) string {
		if s.refuse.Load() {
			return refusedCode
		}
		return ""
	}
	return c
}

// rig is one subtest's backend, simulator and store, and the results the
// backend reported.
type rig struct {
	t       *testing.T
	ctx     context.Context
	b       server.Backend
	sim     *sim.Server
	store   captchaq.Store
	sw      *simSwitch
	results chan captchaq.Result
	// stop shuts the backend down (idempotent; also when the test ends).
	stop func() error
}

func start(t *testing.T, simConfig func(*simSwitch) sim.Config, newBackend func(*testing.T, Env) server.Backend) *rig {
	t.Helper()
	sw := &simSwitch{}
	srv, apiURL, err := sim.Start(simConfig(sw), "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() }) // runs last: after the backend is shut down
	ctx, cancel := context.WithTimeout(context.Background(), 5*resultWait)
	t.Cleanup(cancel)
	r := &rig{t: t, ctx: ctx, sim: srv, sw: sw, store: captchaq.NewMemoryStore(captchaq.MemoryStoreConfig{}),
		results: make(chan captchaq.Result, 100)}
	r.b = newBackend(t, Env{ProviderURL: apiURL, Store: r.store})
	err = r.b.Attach(map[string]int{tenant: 1}, func(res captchaq.Result) {
		// The promise: a result is durable before it is told.
		rec, err := r.store.Get(context.Background(), res.ID)
		switch {
		case err != nil:
			t.Errorf("result of %s told before it is stored: %v", res.ID, err)
		case rec.Status != res.Status || rec.Result == nil || rec.Result.Token != res.Token || rec.Result.ErrorCode != res.ErrorCode:
			t.Errorf("result of %s told before it is stored: told %s %q %s, stored %s %+v", res.ID, res.Status, res.Token, res.ErrorCode, rec.Status, rec.Result)
		}
		r.results <- res
	})
	if err != nil {
		t.Fatalf("Attach: %v", err)
	}
	if err := r.b.Start(ctx); err != nil {
		t.Fatalf("Start: %v", err)
	}
	var once sync.Once
	var stopErr error
	r.stop = func() error {
		once.Do(func() {
			sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			stopErr = r.b.Shutdown(sctx)
			// Tasks left unsolved on purpose may outlast the wait.
			if errors.Is(stopErr, context.DeadlineExceeded) {
				stopErr = nil
			}
		})
		return stopErr
	}
	t.Cleanup(func() {
		if err := r.stop(); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
	})
	return r
}

// task is a valid turnstile task of the suite's tenant.
func task(name string) captchaq.Task {
	return captchaq.Task{ID: tenant + "/" + name, Tenant: tenant, Method: "turnstile",
		Params: map[string]string{"sitekey": "0x4AAAAAAAB", "pageurl": "https://shop.example/" + name}}
}

func (r *rig) submit(tk captchaq.Task) {
	r.t.Helper()
	if err := r.b.Submit(r.ctx, r.valid(tk)); err != nil {
		r.t.Fatalf("Submit %s: %v", tk.ID, err)
	}
}

// valid is tk as the backend's Check validates it.
func (r *rig) valid(tk captchaq.Task) captchaq.ValidTask {
	r.t.Helper()
	v, err := r.b.Check(tk)
	if err != nil {
		r.t.Fatalf("Check %s: %v", tk.ID, err)
	}
	return v
}

// solve submits the task named name and waits for it to be told solved.
func (r *rig) solve(name string) (captchaq.Task, captchaq.Result) {
	r.t.Helper()
	tk := task(name)
	r.submit(tk)
	res := r.next()
	if res.ID != tk.ID || res.Status != captchaq.StatusSolved || res.Token == "" {
		r.t.Fatalf("result %+v, want %s solved with a token", res, tk.ID)
	}
	return tk, res
}

// next is the next result the backend tells.
func (r *rig) next() captchaq.Result {
	r.t.Helper()
	select {
	case res := <-r.results:
		return res
	case <-time.After(resultWait):
	}
	r.t.Fatalf("no result within %v", resultWait)
	return captchaq.Result{}
}

// none fails if the backend tells a result within quiet.
func (r *rig) none() {
	r.t.Helper()
	select {
	case res := <-r.results:
		r.t.Fatalf("unexpected result %+v", res)
	case <-time.After(quiet):
	}
}

func (r *rig) get(id string) captchaq.Record {
	r.t.Helper()
	rec, err := r.b.Get(r.ctx, id)
	if err != nil {
		r.t.Fatalf("Get %s: %v", id, err)
	}
	return rec
}

func (r *rig) pending() []string {
	r.t.Helper()
	var ids []string
	if err := r.b.Pending(r.ctx, func(rec captchaq.Record) error {
		ids = append(ids, rec.Task.ID)
		return nil
	}); err != nil {
		r.t.Fatalf("Pending: %v", err)
	}
	slices.Sort(ids)
	return ids
}

// deadLetters lists the dead letters among ids, or all of them.
func (r *rig) deadLetters(ids ...string) []string {
	r.t.Helper()
	var got []string
	if err := r.b.DeadLetters(r.ctx, captchaq.DeadLetterFilter{IDs: ids, All: len(ids) == 0}, func(rec captchaq.Record) error {
		got = append(got, rec.Task.ID)
		return nil
	}); err != nil {
		r.t.Fatalf("DeadLetters: %v", err)
	}
	slices.Sort(got)
	return got
}

func unfinished(s captchaq.Status) bool {
	return !s.Final()
}

// testSubmitSolvedOnce: a task Submit took is recorded before Submit
// returns, listed by Pending until it is final, solved at the provider
// once, and told once, durable, with the record's token.
func testSubmitSolvedOnce(t *testing.T, r *rig) {
	tk := task("a")
	r.submit(tk)
	if rec := r.get(tk.ID); rec.Task.ID != tk.ID || rec.Task.Tenant != tenant || rec.Task.Params["pageurl"] != tk.Params["pageurl"] {
		t.Fatalf("record after Submit: %+v", rec)
	}
	res := r.next()
	if res.ID != tk.ID || res.Status != captchaq.StatusSolved || res.Token == "" || res.Method != "turnstile" {
		t.Fatalf("result %+v, want %s solved with a token", res, tk.ID)
	}
	if rec := r.get(tk.ID); rec.Status != captchaq.StatusSolved || rec.Result == nil || rec.Result.Token != res.Token {
		t.Fatalf("record after the result: %+v, want solved with %q", rec, res.Token)
	}
	if p := r.pending(); len(p) != 0 {
		t.Fatalf("Pending after the result: %v, want none", p)
	}
	r.none()
	if n := r.sim.Stats().Accepted; n != 1 {
		t.Fatalf("the provider accepted %d tasks, want 1", n)
	}
	if m := r.b.Metrics(); m.Submitted != 1 || m.Solved != 1 || m.Failed != 0 || m.QueueDepth != 0 {
		t.Fatalf("Metrics: submitted %d solved %d failed %d depth %d; want 1 1 0 0", m.Submitted, m.Solved, m.Failed, m.QueueDepth)
	}
	if err := r.b.Ready(r.ctx); err != nil {
		t.Fatalf("Ready while running: %v", err)
	}
}

// testKnownID: the same task submitted again under a known id, unfinished
// or solved, is left as it is: no second solve, no second result.
func testKnownID(t *testing.T, r *rig) {
	tk := task("b")
	r.submit(tk)
	r.submit(tk)
	res := r.next()
	if res.ID != tk.ID || res.Status != captchaq.StatusSolved {
		t.Fatalf("result %+v", res)
	}
	accepted := r.get(tk.ID).AcceptedAt
	r.submit(tk)
	r.none()
	if rec := r.get(tk.ID); rec.Status != captchaq.StatusSolved || rec.Result.Token != res.Token || !rec.AcceptedAt.Equal(accepted) {
		t.Fatalf("record after a third Submit: %+v, want it as it was (token %q, accepted %v)", rec, res.Token, accepted)
	}
	if n := r.sim.Stats().Accepted; n != 1 {
		t.Fatalf("the provider accepted %d tasks, want 1", n)
	}
}

// testIDConflict: another task under a known id is refused with an
// *captchaq.IDConflictError, and the first task is kept.
func testIDConflict(t *testing.T, r *rig) {
	tk := task("c")
	r.submit(tk)
	other := tk
	other.Params = map[string]string{"sitekey": "0x4AAAAAAAB", "pageurl": "https://other.example/"}
	err := r.b.Submit(r.ctx, r.valid(other))
	var ce *captchaq.IDConflictError
	if !errors.As(err, &ce) || !errors.Is(err, captchaq.ErrIDConflict) || ce.ID != tk.ID || ce.Differs != "params.pageurl differs" {
		t.Fatalf("Submit of another task under %s: %v, want an IDConflictError naming params.pageurl", tk.ID, err)
	}
	if rec := r.get(tk.ID); rec.Task.Params["pageurl"] != tk.Params["pageurl"] {
		t.Fatalf("record after the conflict: %+v, want the first task", rec)
	}
}

// testBadTask: an invalid task is refused by Check with a
// *captchaq.TaskError, and Submit refuses a task no Check made (the zero
// ValidTask) as invalid; neither leaves a trace: no record, no request
// to the provider.
func testBadTask(t *testing.T, r *rig) {
	bad := task("d")
	bad.Params = map[string]string{"sitekey": "0x4AAAAAAAB", "pageurl": "ftp://shop.example/"}
	_, err := r.b.Check(bad)
	var te *captchaq.TaskError
	if !errors.As(err, &te) || te.Code != captchaq.CodeInvalidTask || te.ID != bad.ID {
		t.Fatalf("Check of a bad task: %v, want a TaskError %s for %s", err, captchaq.CodeInvalidTask, bad.ID)
	}
	if err := r.b.Submit(r.ctx, captchaq.ValidTask{}); !errors.As(err, &te) || te.Code != captchaq.CodeInvalidTask {
		t.Fatalf("Submit of a task no Check made: %v, want a TaskError %s", err, captchaq.CodeInvalidTask)
	}
	if _, err := r.b.Get(r.ctx, bad.ID); !errors.Is(err, captchaq.ErrNotFound) {
		t.Fatalf("Get of a refused task: %v, want ErrNotFound", err)
	}
	r.none()
	if n := r.sim.Stats().Accepted; n != 0 {
		t.Fatalf("the provider accepted %d tasks, want 0", n)
	}
}

// testUnknownIDs: ids the backend never took are ErrNotFound to Get and
// Cancel, and nothing to DeadLetters and Replay.
func testUnknownIDs(t *testing.T, r *rig) {
	const id = tenant + "/never"
	if _, err := r.b.Get(r.ctx, id); !errors.Is(err, captchaq.ErrNotFound) {
		t.Errorf("Get: %v, want ErrNotFound", err)
	}
	if err := r.b.Cancel(r.ctx, id); !errors.Is(err, captchaq.ErrNotFound) {
		t.Errorf("Cancel: %v, want ErrNotFound", err)
	}
	if got := r.deadLetters(id); len(got) != 0 {
		t.Errorf("DeadLetters: %v, want none", got)
	}
	if ids, err := r.b.Replay(r.ctx, []string{id}); err != nil || len(ids) != 0 {
		t.Errorf("Replay: %v, %v; want none, nil", ids, err)
	}
}

// testExpired: the same task submitted again after its token expired is
// solved again under its id: a second solve at the provider, a second
// result with a new token.
func testExpired(t *testing.T, r *rig) {
	tk, first := r.solve("e")
	rec := r.get(tk.ID)
	dead := *rec.Result
	dead.ExpiresAt = time.Now().Add(-time.Second)
	if err := r.store.Finish(r.ctx, dead); err != nil {
		t.Fatal(err)
	}
	r.submit(tk)
	again := r.next()
	if again.ID != tk.ID || again.Status != captchaq.StatusSolved || again.Token == "" || again.Token == first.Token {
		t.Fatalf("after the token expired: %+v (first token %q), want solved with a new token", again, first.Token)
	}
	if n := r.sim.Stats().Accepted; n != 2 {
		t.Fatalf("the provider accepted %d tasks, want 2", n)
	}
	if rec := r.get(tk.ID); rec.Status != captchaq.StatusSolved || rec.Result.Token != again.Token {
		t.Fatalf("record: %+v, want the new token", rec)
	}
}

// testCancelUnfinished: Cancel of an unfinished task either fails it with
// CANCELED (told once, a dead letter, final to a second Cancel) or says
// ErrInFlight and leaves it unfinished.
func testCancelUnfinished(t *testing.T, r *rig) {
	tk := task("f")
	r.submit(tk)
	if p := r.pending(); !slices.Equal(p, []string{tk.ID}) {
		t.Fatalf("Pending: %v, want [%s]", p, tk.ID)
	}
	err := r.b.Cancel(r.ctx, tk.ID)
	switch {
	case errors.Is(err, captchaq.ErrInFlight):
		if rec := r.get(tk.ID); !unfinished(rec.Status) {
			t.Fatalf("Cancel said ErrInFlight, record %+v", rec)
		}
		r.none()
		return
	case err != nil:
		t.Fatalf("Cancel: %v, want nil or ErrInFlight", err)
	}
	res := r.next()
	if res.ID != tk.ID || res.Status != captchaq.StatusFailed || res.ErrorCode != captchaq.CodeCanceled {
		t.Fatalf("result after Cancel: %+v, want %s failed %s", res, tk.ID, captchaq.CodeCanceled)
	}
	if rec := r.get(tk.ID); rec.Status != captchaq.StatusFailed || rec.Result.ErrorCode != captchaq.CodeCanceled {
		t.Fatalf("record after Cancel: %+v", rec)
	}
	if p := r.pending(); len(p) != 0 {
		t.Fatalf("Pending after Cancel: %v, want none", p)
	}
	if got := r.deadLetters(); !slices.Equal(got, []string{tk.ID}) {
		t.Fatalf("DeadLetters after Cancel: %v, want [%s]", got, tk.ID)
	}
	if err := r.b.Cancel(r.ctx, tk.ID); !errors.Is(err, captchaq.ErrFinal) {
		t.Fatalf("second Cancel: %v, want ErrFinal", err)
	}
	r.none()
}

// testCancelFinal: a solved task cannot be canceled.
func testCancelFinal(t *testing.T, r *rig) {
	tk, _ := r.solve("g")
	if err := r.b.Cancel(r.ctx, tk.ID); !errors.Is(err, captchaq.ErrFinal) {
		t.Fatalf("Cancel of a solved task: %v, want ErrFinal", err)
	}
	if rec := r.get(tk.ID); rec.Status != captchaq.StatusSolved {
		t.Fatalf("record after Cancel: %+v, want still solved", rec)
	}
}

// testDeadLetters: a task the provider refuses is told failed and is a
// dead letter; DeadLetters filters by id; Replay runs it again, returns
// the ids unfinished again (not the unknown or solved ones), and it is
// then solved and told again.
func testDeadLetters(t *testing.T, r *rig) {
	r.sw.refuse.Store(true)
	bad, good := task("h"), task("i")
	r.submit(bad)
	res := r.next()
	if res.ID != bad.ID || res.Status != captchaq.StatusFailed || res.ErrorCode != refusedCode {
		t.Fatalf("result %+v, want %s failed %s", res, bad.ID, refusedCode)
	}
	r.sw.refuse.Store(false)
	r.submit(good)
	if res := r.next(); res.ID != good.ID || res.Status != captchaq.StatusSolved {
		t.Fatalf("result %+v, want %s solved", res, good.ID)
	}
	if got := r.deadLetters(); !slices.Equal(got, []string{bad.ID}) {
		t.Fatalf("DeadLetters: %v, want [%s]", got, bad.ID)
	}
	if got := r.deadLetters(good.ID); len(got) != 0 {
		t.Fatalf("DeadLetters of a solved id: %v, want none", got)
	}
	ids, err := r.b.Replay(r.ctx, []string{bad.ID, good.ID, tenant + "/never"})
	if err != nil || !slices.Equal(ids, []string{bad.ID}) {
		t.Fatalf("Replay: %v, %v; want [%s], nil", ids, err, bad.ID)
	}
	res = r.next()
	if res.ID != bad.ID || res.Status != captchaq.StatusSolved || res.Token == "" {
		t.Fatalf("result after Replay: %+v, want %s solved", res, bad.ID)
	}
	if got := r.deadLetters(); len(got) != 0 {
		t.Fatalf("DeadLetters after the replayed task was solved: %v, want none", got)
	}
	if ids, err := r.b.Replay(r.ctx, []string{bad.ID}); err != nil || len(ids) != 0 {
		t.Fatalf("Replay of a solved task: %v, %v; want none, nil", ids, err)
	}
	r.none()
}

// testReportOnce: the first report of a solved task is recorded (true),
// every later one is not (false); a failed task and an unknown id are
// refused.
func testReportOnce(t *testing.T, r *rig) {
	tk, _ := r.solve("l")
	first, err := r.b.RecordReport(r.ctx, tk.ID, false)
	if err != nil || !first {
		t.Fatalf("first report: %v, %v; want true, nil", first, err)
	}
	for _, good := range []bool{false, true} {
		if again, err := r.b.RecordReport(r.ctx, tk.ID, good); err != nil || again {
			t.Fatalf("a later report (good %v): %v, %v; want false, nil", good, again, err)
		}
	}
	if rec := r.get(tk.ID); rec.Report != captchaq.ReportBad || rec.ReportedAt.IsZero() {
		t.Fatalf("record after the reports: report %q at %v, want bad", rec.Report, rec.ReportedAt)
	}
	r.sw.refuse.Store(true)
	bad := task("m")
	r.submit(bad)
	if res := r.next(); res.ID != bad.ID || res.Status != captchaq.StatusFailed {
		t.Fatalf("result %+v, want %s failed", res, bad.ID)
	}
	if _, err := r.b.RecordReport(r.ctx, bad.ID, false); !errors.Is(err, captchaq.ErrNotSolved) {
		t.Fatalf("report of a failed task: %v, want ErrNotSolved", err)
	}
	if _, err := r.b.RecordReport(r.ctx, tenant+"/never", true); !errors.Is(err, captchaq.ErrNotFound) {
		t.Fatalf("report of an unknown id: %v, want ErrNotFound", err)
	}
}

// testClosed: after Shutdown, Submit and Ready say ErrClosed, records
// stay readable, and a second Shutdown returns nil.
func testClosed(t *testing.T, r *rig) {
	tk, _ := r.solve("j")
	if err := r.stop(); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if err := r.b.Submit(r.ctx, r.valid(task("k"))); !errors.Is(err, captchaq.ErrClosed) {
		t.Errorf("Submit after Shutdown: %v, want ErrClosed", err)
	}
	if err := r.b.Ready(r.ctx); !errors.Is(err, captchaq.ErrClosed) {
		t.Errorf("Ready after Shutdown: %v, want ErrClosed", err)
	}
	if rec := r.get(tk.ID); rec.Status != captchaq.StatusSolved {
		t.Errorf("Get after Shutdown: %+v", rec)
	}
	if err := r.b.Shutdown(r.ctx); err != nil {
		t.Errorf("second Shutdown: %v", err)
	}
}
