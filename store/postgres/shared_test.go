package postgres_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/internal/pgtest"
	"github.com/captchaq/captchaq/internal/testbound"
	"github.com/captchaq/captchaq/store/postgres"
)

// Of several processes that read a task unfinished and took a result for
// it, one stores it; the others learn the record changed.
func TestFinishIfStoresOnce(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t)
	a := open(t, url, postgres.Config{})
	b := open(t, url, postgres.Config{})
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
	url := pgtest.NewDatabase(t)
	a := open(t, url, postgres.Config{Notify: true})
	b := open(t, url, postgres.Config{Notify: true})
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
	url := pgtest.NewDatabase(t)
	a := open(t, url, postgres.Config{})
	b := open(t, url, postgres.Config{})
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

// One active queue per database: a second is refused naming the first; a
// standby takes over once the first releases or its connection dies.
func TestActiveQueue(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t)
	a := open(t, url, postgres.Config{})
	b := open(t, url, postgres.Config{})
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

// TakeSlots keeps a tenant's max_inflight across processes: of 20 takes
// at once from two stores, 3 fit; a slot counts until its task is
// recorded and then while the task is unfinished; a finished task, or a
// slot given back, makes room; a dead letter replayed takes a slot too.
func TestTakeSlotsAcrossProcesses(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t)
	a := open(t, url, postgres.Config{})
	b := open(t, url, postgres.Config{})
	ctx := t.Context()
	const max = 3
	var mu sync.Mutex
	var took []string
	var wg sync.WaitGroup
	for i := range 20 {
		s := []*postgres.Store{a, b}[i%2]
		id := "qa/" + string(rune('a'+i))
		wg.Go(func() {
			ok, _, err := s.TakeSlots(ctx, "qa", []string{id}, max)
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
	if ok, held, err := b.TakeSlots(ctx, "ops", []string{"ops/1"}, 1); err != nil || !ok || held != 0 {
		t.Fatalf("ops TakeSlots = %v, %d, %v; want true, 0, nil", ok, held, err)
	}
	// Recorded, the tasks hold their room (once each, not twice).
	var tasks []captchaq.Task
	for _, id := range took {
		tasks = append(tasks, captchaq.Task{ID: id, Method: "turnstile", Tenant: "qa"})
	}
	if _, _, err := a.Enqueue(ctx, tasks, time.Now()); err != nil {
		t.Fatal(err)
	}
	if ok, held, err := b.TakeSlots(ctx, "qa", []string{"qa/x"}, max); err != nil || ok || held != max {
		t.Fatalf("TakeSlots with %d recorded = %v, %d, %v; want false, %d, nil", max, ok, held, err, max)
	}
	// One finishes (failed: a dead letter): room for one more.
	if err := a.Finish(ctx, captchaq.Result{ID: took[0], Status: captchaq.StatusFailed, ErrorCode: "EXPIRED", FinishedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if ok, held, err := b.TakeSlots(ctx, "qa", []string{"qa/x"}, max); err != nil || !ok || held != max-1 {
		t.Fatalf("TakeSlots after a finish = %v, %d, %v; want true, %d, nil", ok, held, err, max-1)
	}
	// Given back (not accepted), the slot is free again, and the replay
	// of the dead letter takes it, and holds it once replayed.
	if err := b.FreeSlots(ctx, []string{"qa/x"}); err != nil {
		t.Fatal(err)
	}
	if ok, _, err := a.TakeSlots(ctx, "qa", []string{took[0]}, max); err != nil || !ok {
		t.Fatalf("TakeSlots for a replay = %v, %v; want true", ok, err)
	}
	if ok, held, err := b.TakeSlots(ctx, "qa", []string{"qa/y"}, max); err != nil || ok || held != max {
		t.Fatalf("TakeSlots while the replay's slot is held = %v, %d, %v; want false, %d, nil", ok, held, err, max)
	}
	if n, err := a.Replay(ctx, captchaq.DeadLetterFilter{IDs: []string{took[0]}}, time.Now()); err != nil || n != 1 {
		t.Fatalf("Replay = %d, %v", n, err)
	}
	if ok, held, err := b.TakeSlots(ctx, "qa", []string{"qa/y"}, max); err != nil || ok || held != max {
		t.Fatalf("TakeSlots after the replay = %v, %d, %v; want false, %d, nil", ok, held, err, max)
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
