package captchaq

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/captchaq/captchaq/internal/pingback"
	"github.com/captchaq/captchaq/internal/testbound"
	"github.com/captchaq/captchaq/provider"
)

// scriptedLane is a provider whose submits get the ids prefix1, prefix2,
// ... and whose polls answer with poll.
type scriptedLane struct {
	prefix string
	poll   func(ids []string) ([]provider.PollResult, error)

	mu      sync.Mutex
	submits int
}

func (s *scriptedLane) Submit(context.Context, provider.Task, string) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.submits++
	return fmt.Sprintf("%s%d", s.prefix, s.submits), nil
}

func (s *scriptedLane) PollMany(_ context.Context, ids []string) ([]provider.PollResult, error) {
	return s.poll(ids)
}

func (s *scriptedLane) submitted() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.submits
}

// answerAll answers every id polled with token.
func answerAll(token string) func([]string) ([]provider.PollResult, error) {
	return func(ids []string) ([]provider.PollResult, error) {
		rs := make([]provider.PollResult, len(ids))
		for i := range rs {
			rs[i] = provider.PollResult{Ready: true, Answer: provider.Answer{Raw: token, Token: token}}
		}
		return rs, nil
	}
}

// startTwoLanes starts a queue on providers "a" then "b", one thread each
// for Turnstile, with pingbacks (so polls come late), a one-second poll
// interval and every result sent to results.
func startTwoLanes(t *testing.T, store Store, a, b Provider, results chan<- Result) *Queue {
	t.Helper()
	return startQueue(t, Config{
		Store: store,
		Providers: []ProviderConfig{
			{Name: "a", Provider: a, Threads: 1, Methods: []string{"turnstile"}},
			{Name: "b", Provider: b, Threads: 1, Methods: []string{"turnstile"}},
		},
		PingbackURL:  "https://example.com/pingback",
		PollInterval: time.Second,
		OnResult:     func(r Result) { results <- r },
	})
}

func turnstileTask(id string) Task {
	return Task{ID: id, Method: "turnstile", Params: map[string]string{"sitekey": "0x4AAAAAAAC3DHQFLr1GavRN", "pageurl": "https://a.example/" + id}}
}

// retryHookStore calls onRetry before each Retry it stores.
type retryHookStore struct {
	Store
	onRetry func(id string)
}

func (s *retryHookStore) Retry(ctx context.Context, id string, attempts int, notBefore time.Time, text, code string) error {
	if s.onRetry != nil {
		s.onRetry(id)
	}
	return s.Store.Retry(ctx, id, attempts, notBefore, text, code)
}

// A task in flight at a provider that refuses the account is moved to the
// other provider. An answer from the first provider (a pingback) that
// comes while the move is under way, or after it, must not finish the
// task as well: either the answer wins and the task is not submitted
// again, or the move wins and the answer is dropped. Here the move wins
// every time (the answer comes after the move began); the task is then
// solved once, at "b", paid at "b" once, and nothing is left in flight.
//
// The clock is synctest's; the answers are delivered at fixed points of
// the move (the Store's Retry, b's first poll), so each order is run
// exactly, not hoped for.
func TestMoveInflightRacesPingback(t *testing.T) {
	t.Parallel()
	const tokenA, tokenB = "token-from-a", "token-from-b"
	cases := []struct {
		name string
		// duringMove runs inside the move's Store write; st is the task
		// as a pingback handler looked it up before the move.
		duringMove func(q *Queue, st *taskState)
		// atFirstPollB runs when b is first polled (the task in flight
		// there).
		atFirstPollB func(q *Queue, st *taskState)
	}{
		{name: "pingback served during the move", duringMove: func(q *Queue, _ *taskState) {
			rec := httptest.NewRecorder()
			q.PingbackHandler().ServeHTTP(rec, httptest.NewRequest("GET", q.inboxes[0].URL()+"&id=A1&code="+tokenA, nil))
		}},
		{name: "pingback looked up before the move, finished during it", duringMove: func(q *Queue, st *taskState) {
			q.pingbackArrived(st, "A1", pingback.Pingback{Answer: provider.Answer{Raw: tokenA, Token: tokenA}, At: time.Now()})
		}},
		{name: "pingback looked up before the move, finished at the other provider", atFirstPollB: func(q *Queue, st *taskState) {
			q.pingbackArrived(st, "A1", pingback.Pingback{Answer: provider.Answer{Raw: tokenA, Token: tokenA}, At: time.Now()})
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				var (
					q        *Queue
					lookedUp *taskState // the task as a pingback found it while at a
					once     sync.Once
					onceB    sync.Once
				)
				a := &scriptedLane{prefix: "A", poll: func(ids []string) ([]provider.PollResult, error) {
					q.table.Do(func(tx table) {
						if st, ok := tx.ByKey("a:A1"); ok { // lane.storedID
							lookedUp = st
						}
					})
					return nil, provider.ErrKeyDoesNotExist
				}}
				b := &scriptedLane{prefix: "B", poll: func(ids []string) ([]provider.PollResult, error) {
					if c.atFirstPollB != nil {
						onceB.Do(func() { c.atFirstPollB(q, lookedUp) })
					}
					return answerAll(tokenB)(ids)
				}}
				store := &retryHookStore{Store: NewMemoryStore(MemoryStoreConfig{})}
				if c.duringMove != nil {
					store.onRetry = func(string) { once.Do(func() { c.duringMove(q, lookedUp) }) }
				}
				results := make(chan Result, 4)
				q = startTwoLanes(t, store, a, b, results)
				if _, err := q.Submit(t.Context(), turnstileTask("t1")); err != nil {
					t.Fatal(err)
				}
				var r Result
				select {
				case r = <-results:
				case <-time.After(time.Hour):
					t.Fatal("no result within an hour of fake time")
				}
				// Let every loop run on for a while: a second submit, a
				// second result or a task left in flight would show.
				testbound.Advance(10 * time.Minute)
				if lookedUp == nil {
					t.Fatal("the task was never in flight at a")
				}
				if r.ID != "t1" || r.Status != StatusSolved || r.Token != tokenB || r.Provider != "b" || r.CaptchaID != "B1" || !slices.Equal(r.Abandoned, []string{"a"}) {
					t.Errorf("result %s %s token %q at %q (id %q, abandoned %v); want t1 solved with %q at b (id B1, abandoned [a])", r.ID, r.Status, r.Token, r.Provider, r.CaptchaID, r.Abandoned, tokenB)
				}
				select {
				case r2 := <-results:
					t.Errorf("second result for %s: %s token %q at %q", r2.ID, r2.Status, r2.Token, r2.Provider)
				default:
				}
				if na, nb := a.submitted(), b.submitted(); na != 1 || nb != 1 {
					t.Errorf("submits: %d at a, %d at b; want 1 and 1", na, nb)
				}
				c := q.table.Counts()
				tasks, inflight, byID := c.Tasks, c.InFlight, c.Keys
				if tasks != 0 || inflight != 0 || byID != 0 {
					t.Errorf("left behind: %d tasks, %d in flight, %d provider ids; want none", tasks, inflight, byID)
				}
				for _, l := range q.lanes.Lanes() {
					if n := l.Limiter.InUse(); n != 0 {
						t.Errorf("lane %s: %d threads still taken, want 0", l.Name(), n)
					}
				}
				rec, err := q.Get(t.Context(), "t1")
				if err != nil || rec.Status != StatusSolved || rec.Result == nil || rec.Result.Token != tokenB {
					t.Errorf("stored record: %+v, %v; want solved with %q", rec, err, tokenB)
				}
			})
		})
	}
}

// Two providers number their ids on their own, so both may have a task in
// flight under the same id. A pingback names its provider (provider=NAME
// in the URL each lane's submits carry) beside the id: a's pingback
// finishes a's task only, and b's task gets b's own answer. The clock is
// synctest's.
func TestPingbackForAnIDTwoProvidersShare(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		// Both number their ids X1, X2, ...
		a := &scriptedLane{prefix: "X", poll: answerAll("token-from-a")}
		b := &scriptedLane{prefix: "X", poll: answerAll("token-from-b")}
		results := make(chan Result, 4)
		q := startTwoLanes(t, NewMemoryStore(MemoryStoreConfig{}), a, b, results)
		for _, id := range []string{"t1", "t2"} {
			if _, err := q.Submit(t.Context(), turnstileTask(id)); err != nil {
				t.Fatal(err)
			}
		}
		synctest.Wait()
		inflight := q.table.Counts().InFlight
		if inflight != 2 || a.submitted() != 1 || b.submitted() != 1 {
			t.Fatalf("%d in flight, %d submits at a, %d at b; want one X1 at each", inflight, a.submitted(), b.submitted())
		}
		rec := httptest.NewRecorder()
		q.PingbackHandler().ServeHTTP(rec, httptest.NewRequest("GET", q.inboxes[0].URL()+"&id=X1&code=token-from-a-pingback", nil))
		byProvider := map[string]string{}
		for range 2 {
			select {
			case r := <-results:
				byProvider[r.Provider] = r.Token
			case <-time.After(time.Hour):
				t.Fatalf("results after an hour of fake time: %v", byProvider)
			}
		}
		if rec.Code != http.StatusOK || byProvider["a"] != "token-from-a-pingback" || byProvider["b"] != "token-from-b" {
			t.Errorf("pingback answered %d; tokens by provider %v; want a's task a's pingback answer, b's task b's own polled answer", rec.Code, byProvider)
		}
	})
}
