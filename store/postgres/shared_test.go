package postgres_test

import (
	"bytes"
	"context"
	"errors"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/internal/pgtest"
	"github.com/captchaq/captchaq/internal/testbound"
	"github.com/captchaq/captchaq/store/postgres"
)

// twoStores opens two Stores with cfg on a new database of their own, as
// two processes of one front would, and returns its URL too.
func twoStores(t *testing.T, cfg postgres.Config) (a, b *postgres.Store, url string) {
	t.Helper()
	url = pgtest.NewDatabase(t)
	return open(t, url, cfg), open(t, url, cfg), url
}

// Of several processes that read a task unfinished and took a result for
// it, one stores it; the others learn the record changed.
func TestFinishIfStoresOnce(t *testing.T) {
	t.Parallel()
	a, b, _ := twoStores(t, postgres.Config{})
	ctx := t.Context()
	if _, _, err := a.Enqueue(ctx, []captchaq.Task{{ID: "t", Method: "turnstile"}}, time.Now()); err != nil {
		t.Fatal(err)
	}
	if err := a.Checkpoint(ctx, "t", "gateway:front", 0, time.Now()); err != nil {
		t.Fatal(err)
	}
	seen, err := b.Get(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	const n = 8
	var wg sync.WaitGroup
	won := make(chan string, n)
	for i := range n {
		s := a
		if i%2 == 1 {
			s = b
		}
		wg.Go(func() {
			r := captchaq.Result{ID: "t", Status: captchaq.StatusSolved, Token: "tok-" + string(rune('a'+i)), FinishedAt: time.Now()}
			ok, err := s.FinishIf(ctx, r, seen)
			if err != nil {
				t.Error(err)
			}
			if ok {
				won <- r.Token
			}
		})
	}
	wg.Wait()
	close(won)
	var tokens []string
	for tok := range won {
		tokens = append(tokens, tok)
	}
	if len(tokens) != 1 {
		t.Fatalf("%d FinishIf calls stored a result (%v), want 1", len(tokens), tokens)
	}
	rec, err := a.Get(ctx, "t")
	if err != nil || rec.Result == nil || rec.Result.Token != tokens[0] {
		t.Fatalf("stored %+v, %v; want token %s", rec.Result, err, tokens[0])
	}
	// A failure that a solved answer replaces: the record read final.
	if ok, err := b.FinishIf(ctx, captchaq.Result{ID: "t", Status: captchaq.StatusFailed, FinishedAt: time.Now()}, rec); err != nil || !ok {
		t.Fatalf("FinishIf on the final record as read = %v, %v", ok, err)
	}
	if ok, err := a.FinishIf(ctx, captchaq.Result{ID: "t", Status: captchaq.StatusSolved, FinishedAt: time.Now()}, rec); err != nil || ok {
		t.Fatalf("FinishIf on a record read before it changed = %v, %v; want false", ok, err)
	}
	if ok, err := a.FinishIf(ctx, captchaq.Result{ID: "nope", Status: captchaq.StatusSolved}, rec); err != nil || ok {
		t.Fatalf("FinishIf of an unknown id = %v, %v; want false", ok, err)
	}
}

// Each Store hears the tasks the others accept (Config.Notify) and finish
// (FinishIf), never its own.
func TestWatchHearsTheOthers(t *testing.T) {
	t.Parallel()
	a, b, _ := twoStores(t, postgres.Config{Notify: true})
	events := make(chan postgres.Event, 16)
	own := make(chan postgres.Event, 16)
	if err := b.Watch(func(e postgres.Event) { events <- e }); err != nil {
		t.Fatal(err)
	}
	if err := a.Watch(func(e postgres.Event) { own <- e }); err != nil {
		t.Fatal(err)
	}
	if err := b.Watch(func(postgres.Event) {}); err == nil {
		t.Error("a second Watch was accepted")
	}
	ctx := t.Context()
	// Watch has LISTENed once an event of b reaches a.
	waitListening(t, b, own)
	if _, _, err := a.Enqueue(ctx, []captchaq.Task{{ID: "x/1", Method: "turnstile"}, {ID: "x/2", Method: "turnstile"}}, time.Now()); err != nil {
		t.Fatal(err)
	}
	seen, _ := a.Get(ctx, "x/1")
	if ok, err := a.FinishIf(ctx, captchaq.Result{ID: "x/1", Status: captchaq.StatusSolved, FinishedAt: time.Now()}, seen); !ok || err != nil {
		t.Fatalf("FinishIf = %v, %v", ok, err)
	}
	want := []postgres.Event{{Kind: postgres.EventAccepted, ID: "x/1"}, {Kind: postgres.EventAccepted, ID: "x/2"}, {Kind: postgres.EventFinished, ID: "x/1"}}
	for i, w := range want {
		select {
		case e := <-events:
			if e != w {
				t.Errorf("event %d = %+v, want %+v", i, e, w)
			}
		case <-time.After(testbound.Bound):
			t.Fatalf("event %d (%+v) never came", i, w)
		}
	}
}

// waitListening enqueues tasks on from until listener's Watch hears one.
func waitListening(t *testing.T, from *postgres.Store, heard chan postgres.Event) {
	t.Helper()
	deadline := time.After(testbound.Bound)
	for i := 0; ; i++ {
		id := "probe-" + strings.Repeat("x", i%3) + time.Now().Format("150405.000000000")
		if _, _, err := from.Enqueue(t.Context(), []captchaq.Task{{ID: id, Method: "turnstile"}}, time.Now()); err != nil {
			t.Fatal(err)
		}
		select {
		case <-heard:
			for len(heard) > 0 {
				<-heard
			}
			return
		case <-time.After(50 * time.Millisecond):
		case <-deadline:
			t.Fatal("the watcher never heard a task")
		}
	}
}

func TestIDBlocksNeverOverlap(t *testing.T) {
	t.Parallel()
	a, b, _ := twoStores(t, postgres.Config{})
	before := uint64(time.Now().UnixMicro())
	seen := map[uint64]bool{}
	for i := range 6 {
		s := a
		if i%2 == 1 {
			s = b
		}
		first, n, err := s.IDBlock(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if first < before-uint64(time.Minute.Microseconds()) || n != 1000 {
			t.Fatalf("IDBlock = %d, %d; want 1000 ids from about the clock in µs (%d)", first, n, before)
		}
		for id := first; id < first+uint64(n); id += 100 {
			if seen[id] {
				t.Fatalf("id %d handed out twice", id)
			}
			seen[id] = true
		}
	}
}

// Every replica of a front gets one id key, however many ask at once,
// and keeps it.
func TestIDKeyIsOneForAllReplicas(t *testing.T) {
	t.Parallel()
	a, b, _ := twoStores(t, postgres.Config{})
	keys := make([][]byte, 8)
	var wg sync.WaitGroup
	for i := range keys {
		s := a
		if i%2 == 1 {
			s = b
		}
		wg.Go(func() {
			k, err := s.IDKey(t.Context())
			if err != nil {
				t.Error(err)
			}
			keys[i] = k
		})
	}
	wg.Wait()
	again, err := a.IDKey(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(again) != 16 || bytes.Equal(again, make([]byte, 16)) {
		t.Fatalf("IDKey = %x: want 16 random bytes", again)
	}
	for i, k := range keys {
		if !bytes.Equal(k, again) {
			t.Errorf("call %d: key %x, want the one key %x", i, k, again)
		}
	}
}

// One active queue per database: a second is refused naming the first; a
// standby takes over once the first releases or its connection dies.
func TestActiveQueue(t *testing.T) {
	t.Parallel()
	a, b, url := twoStores(t, postgres.Config{})
	first, err := a.Activate(t.Context(), false)
	if err != nil {
		t.Fatal(err)
	}
	_, err = b.Activate(t.Context(), false)
	var ae *postgres.ActiveError
	if !errors.Is(err, postgres.ErrActiveElsewhere) || !errors.As(err, &ae) || ae.PID == 0 || !strings.Contains(err.Error(), "--standby") {
		t.Fatalf("second Activate: %v, want an ActiveError naming the holder and the fix", err)
	}
	got := make(chan *postgres.Active, 1)
	go func() {
		s, err := b.Activate(t.Context(), true)
		if err != nil {
			t.Error(err)
		}
		got <- s
	}()
	first.Release()
	var second *postgres.Active
	select {
	case second = <-got:
	case <-time.After(testbound.Bound):
		t.Fatal("the standby did not take over after Release")
	}
	// Its connection killed: the lock is free, and the holder is told.
	exec(t, url, `SELECT pg_terminate_backend(pid) FROM pg_locks WHERE locktype = 'advisory' AND pid <> pg_backend_pid() AND granted AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`)
	select {
	case <-second.Lost():
	case <-time.After(testbound.Bound):
		t.Fatal("Lost was not closed after the lock's connection died")
	}
	second.Release()
	third, err := a.Activate(context.Background(), false)
	if err != nil {
		t.Fatalf("Activate after the holder's connection died: %v", err)
	}
	third.Release()
}

// Admit keeps a tenant's max_inflight across processes: of 20 takes
// at once from two stores, 3 fit; a slot counts until its task is
// recorded and then while the task is unfinished; a finished task, or a
// slot given back, makes room; a dead letter replayed takes a slot too.
func TestAdmitMaxInflightAcrossProcesses(t *testing.T) {
	t.Parallel()
	a, b, _ := twoStores(t, postgres.Config{})
	ctx := t.Context()
	const max = 3
	var mu sync.Mutex
	var took []string
	var wg sync.WaitGroup
	for i := range 20 {
		s := []*postgres.Store{a, b}[i%2]
		id := "qa/" + string(rune('a'+i))
		wg.Go(func() {
			ok, _, _, err := s.Admit(ctx, "qa", []string{id}, max, 0, 0)
			if err != nil {
				t.Error(err)
				return
			}
			if ok {
				mu.Lock()
				took = append(took, id)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(took) != max {
		t.Fatalf("%d of 20 concurrent takes fitted, want %d: %v", len(took), max, took)
	}
	// Another tenant is not held by qa's.
	if ok, held, _, err := b.Admit(ctx, "ops", []string{"ops/1"}, 1, 0, 0); err != nil || !ok || held != 0 {
		t.Fatalf("ops Admit = %v, %d, %v; want true, 0, nil", ok, held, err)
	}
	// Recorded, the tasks hold their room (once each, not twice).
	var tasks []captchaq.Task
	for _, id := range took {
		tasks = append(tasks, captchaq.Task{ID: id, Method: "turnstile", Tenant: "qa"})
	}
	if _, _, err := a.Enqueue(ctx, tasks, time.Now()); err != nil {
		t.Fatal(err)
	}
	if ok, held, _, err := b.Admit(ctx, "qa", []string{"qa/x"}, max, 0, 0); err != nil || ok || held != max {
		t.Fatalf("Admit with %d recorded = %v, %d, %v; want false, %d, nil", max, ok, held, err, max)
	}
	// One finishes (failed: a dead letter): room for one more.
	if err := a.Finish(ctx, captchaq.Result{ID: took[0], Status: captchaq.StatusFailed, ErrorCode: "EXPIRED", FinishedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if ok, held, _, err := b.Admit(ctx, "qa", []string{"qa/x"}, max, 0, 0); err != nil || !ok || held != max-1 {
		t.Fatalf("Admit after a finish = %v, %d, %v; want true, %d, nil", ok, held, err, max-1)
	}
	// Given back (not accepted), the slot is free again, and the replay
	// of the dead letter takes it, and holds it once replayed.
	if err := b.FreeSlots(ctx, []string{"qa/x"}); err != nil {
		t.Fatal(err)
	}
	if ok, _, _, err := a.Admit(ctx, "qa", []string{took[0]}, max, 0, 0); err != nil || !ok {
		t.Fatalf("Admit for a replay = %v, %v; want true", ok, err)
	}
	if ok, held, _, err := b.Admit(ctx, "qa", []string{"qa/y"}, max, 0, 0); err != nil || ok || held != max {
		t.Fatalf("Admit while the replay's slot is held = %v, %d, %v; want false, %d, nil", ok, held, err, max)
	}
	if n, err := a.Replay(ctx, captchaq.DeadLetterFilter{IDs: []string{took[0]}}, time.Now()); err != nil || n != 1 {
		t.Fatalf("Replay = %d, %v", n, err)
	}
	if ok, held, _, err := b.Admit(ctx, "qa", []string{"qa/y"}, max, 0, 0); err != nil || ok || held != max {
		t.Fatalf("Admit after the replay = %v, %d, %v; want false, %d, nil", ok, held, err, max)
	}
}

// Admit keeps a tenant's rate across processes: of 20 admits at once
// from two stores, with a burst of 3 and a rate that adds no token during
// the test, 3 get in; a refusal says how long until a token is there; a
// task refused by max_inflight spends no token, and one refused by the
// rate takes no slot.
func TestAdmitRateAcrossProcesses(t *testing.T) {
	t.Parallel()
	a, b, _ := twoStores(t, postgres.Config{})
	ctx := t.Context()
	const burst, rate = 3, 0.001 // a token every 1,000 s
	var mu sync.Mutex
	var took []string
	var waits []time.Duration
	var wg sync.WaitGroup
	for i := range 20 {
		s := []*postgres.Store{a, b}[i%2]
		id := "qa/" + string(rune('a'+i))
		wg.Go(func() {
			ok, _, wait, err := s.Admit(ctx, "qa", []string{id}, 0, rate, burst)
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			if ok {
				took = append(took, id)
			} else {
				waits = append(waits, wait)
			}
		})
	}
	wg.Wait()
	if len(took) != burst {
		t.Fatalf("%d of 20 concurrent admits got in, want %d: %v", len(took), burst, took)
	}
	for _, w := range waits {
		if w < 900*time.Second || w > 1000*time.Second {
			t.Errorf("a refusal's wait is %v, want the 1,000 s to the next token (less the test's time)", w)
		}
	}
	// Another tenant has a bucket of its own; two at once take two tokens.
	if ok, _, _, err := b.Admit(ctx, "ops", []string{"ops/1", "ops/2"}, 0, rate, 2); err != nil || !ok {
		t.Fatalf("ops Admit of 2 = %v, %v; want true", ok, err)
	}
	if ok, _, _, err := a.Admit(ctx, "ops", []string{"ops/3"}, 0, rate, 2); err != nil || ok {
		t.Fatalf("ops Admit past its burst = %v, %v; want false", ok, err)
	}
	// Both bounds: refused by max_inflight (1 slot held), no token goes;
	// refused by the rate, no slot is taken.
	if ok, _, _, err := a.Admit(ctx, "both", []string{"both/1"}, 1, rate, 2); err != nil || !ok {
		t.Fatalf("both Admit = %v, %v; want true", ok, err)
	}
	for range 3 {
		if ok, held, wait, err := b.Admit(ctx, "both", []string{"both/2"}, 1, rate, 2); err != nil || ok || held != 1 || wait != 0 {
			t.Fatalf("both Admit past max_inflight = %v, %d, %v, %v; want false, 1, 0, nil", ok, held, wait, err)
		}
	}
	if err := a.FreeSlots(ctx, []string{"both/1"}); err != nil {
		t.Fatal(err)
	}
	if ok, _, _, err := b.Admit(ctx, "both", []string{"both/2"}, 1, rate, 2); err != nil || !ok {
		t.Fatalf("both Admit with its second token = %v, %v; want true (refusals by max_inflight spend none)", ok, err)
	}
	if err := a.FreeSlots(ctx, []string{"both/2"}); err != nil {
		t.Fatal(err)
	}
	if ok, held, wait, err := b.Admit(ctx, "both", []string{"both/3"}, 1, rate, 2); err != nil || ok || held != 0 || wait == 0 {
		t.Fatalf("both Admit past its rate = %v, %d, %v, %v; want false, 0, a wait, nil", ok, held, wait, err)
	}
	if ok, held, _, err := b.Admit(ctx, "both", []string{"both/4"}, 1, 0, 0); err != nil || !ok || held != 0 {
		t.Fatalf("both Admit by max_inflight alone after a rate refusal = %v, %d, %v; want true, 0 (it took no slot)", ok, held, err)
	}
}

// EnqueueMarked stores a new task in flight under its mark in one write,
// as Enqueue then Checkpoint would; an id stored already is left as it
// is.
func TestEnqueueMarked(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t)
	a := open(t, url, postgres.Config{})
	ctx := t.Context()
	now := time.Now().UTC().Truncate(time.Microsecond)
	task := captchaq.Task{ID: "qa/1", Method: "turnstile", Tenant: "qa", Params: map[string]string{"sitekey": "k"}}
	rec, ok, err := a.EnqueueMarked(ctx, task, now, "gateway:front")
	if err != nil || !ok {
		t.Fatalf("EnqueueMarked = %v, %v; want true", ok, err)
	}
	got, err := a.Get(ctx, "qa/1")
	if err != nil {
		t.Fatal(err)
	}
	if got.Status != captchaq.StatusInFlight || got.CaptchaID != "gateway:front" || got.Attempts != 0 ||
		!got.AcceptedAt.Equal(now) || !got.SubmittedAt.Equal(now) || got.Seq != rec.Seq || got.Task.Params["sitekey"] != "k" {
		t.Fatalf("stored %+v, want in flight under gateway:front since %v (seq %d)", got, now, rec.Seq)
	}
	if _, ok, err := a.EnqueueMarked(ctx, captchaq.Task{ID: "qa/1", Method: "recaptcha", Tenant: "qa"}, now, "gateway:other"); err != nil || ok {
		t.Fatalf("EnqueueMarked of a stored id = %v, %v; want false", ok, err)
	}
	if got2, _ := a.Get(ctx, "qa/1"); got2.CaptchaID != "gateway:front" || got2.Task.Method != "turnstile" {
		t.Fatalf("a second EnqueueMarked changed the record: %+v", got2)
	}
	if err := a.Finish(ctx, captchaq.Result{ID: "qa/1", Status: captchaq.StatusSolved, Token: "tok", FinishedAt: now}); err != nil {
		t.Fatal(err)
	}
}

// FinishMarked stores a result only for a task in flight under the mark
// it names, once.
func TestFinishMarked(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t)
	a := open(t, url, postgres.Config{})
	ctx := t.Context()
	now := time.Now()
	if _, _, err := a.EnqueueMarked(ctx, captchaq.Task{ID: "qa/1", Method: "turnstile", Tenant: "qa"}, now, "gateway:front@g2"); err != nil {
		t.Fatal(err)
	}
	r := captchaq.Result{ID: "qa/1", Status: captchaq.StatusSolved, Token: "tok", FinishedAt: now}
	if ok, err := a.FinishMarked(ctx, r, "gateway:front@g1"); err != nil || ok {
		t.Fatalf("FinishMarked under another generation's mark = %v, %v; want false", ok, err)
	}
	if ok, err := a.FinishMarked(ctx, r, "gateway:front@g2"); err != nil || !ok {
		t.Fatalf("FinishMarked under its mark = %v, %v; want true", ok, err)
	}
	got, err := a.Get(ctx, "qa/1")
	if err != nil || got.Status != captchaq.StatusSolved || got.Result == nil || got.Result.Token != "tok" {
		t.Fatalf("stored %+v, %v; want solved with tok", got, err)
	}
	r.Token = "other"
	if ok, err := a.FinishMarked(ctx, r, "gateway:front@g2"); err != nil || ok {
		t.Fatalf("FinishMarked of a final task = %v, %v; want false", ok, err)
	}
}

// PendingHeads and Heads read records as Pending and Get do, with no
// params; Heads leaves out an id that is not stored.
func TestHeads(t *testing.T) {
	t.Parallel()
	a := open(t, pgtest.NewDatabase(t), postgres.Config{})
	ctx := t.Context()
	now := time.Now()
	tasks := []captchaq.Task{
		{ID: "qa/1", Method: "base64", Tenant: "qa", Priority: 3, Params: map[string]string{"body": "iVBORw0KGgo"}},
		{ID: "qa/2", Method: "turnstile", Tenant: "qa", Params: map[string]string{"sitekey": "k"}},
	}
	if _, _, err := a.Enqueue(ctx, tasks, now); err != nil {
		t.Fatal(err)
	}
	if err := a.Finish(ctx, captchaq.Result{ID: "qa/2", Status: captchaq.StatusSolved, Token: "tok", FinishedAt: now}); err != nil {
		t.Fatal(err)
	}
	want := func(id string) captchaq.Record {
		rec, err := a.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		rec.Task.Params = nil
		return rec
	}
	var pending, heads []captchaq.Record
	if err := a.PendingHeads(ctx, func(r captchaq.Record) error { pending = append(pending, r); return nil }); err != nil {
		t.Fatal(err)
	}
	if err := a.Heads(ctx, []string{"qa/2", "nope", "qa/1", "bad\x00"}, func(r captchaq.Record) error { heads = append(heads, r); return nil }); err != nil {
		t.Fatal(err)
	}
	if w := []captchaq.Record{want("qa/1")}; !reflect.DeepEqual(pending, w) {
		t.Errorf("PendingHeads = %+v, want %+v", pending, w)
	}
	if w := []captchaq.Record{want("qa/1"), want("qa/2")}; !reflect.DeepEqual(heads, w) {
		t.Errorf("Heads = %+v, want %+v", heads, w)
	}
}
