package amqp

import (
	"strings"
	"testing"
	"time"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/internal/pgtest"
	"github.com/captchaq/captchaq/internal/testbound"
	"github.com/captchaq/captchaq/store/postgres"
)

// frontRig is a gateway on a PostgreSQL store shared with another
// replica (other), whose writes the gateway hears of only by Resync (it
// does not Watch). The gateway's reads go through db, which counts them.
type frontRig struct {
	g     *Gateway
	other *postgres.Store
	db    *pgtest.Counted
	name  string
}

func newFrontRig(t *testing.T, name string) *frontRig {
	t.Helper()
	r := newGatewayRig(t, testConfig(t))
	url := pgtest.NewDatabase(t)
	db := pgtest.Count(t, url)
	ctx := testCtx(t)
	open := func(url string) *postgres.Store {
		s, err := postgres.Open(ctx, url, postgres.Config{Retention: postgres.RetentionOff})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s
	}
	mine, other := open(db.URL), open(url)
	// Resync is called by the test, not every ResyncEvery.
	g, _ := r.gateway(name, nil, func(gc *GatewayConfig) { gc.Store, gc.ResyncEvery = mine, time.Hour })
	return &frontRig{g: g, other: other, db: db, name: name}
}

// resync runs Resync and returns the bytes it read from the database.
func (f *frontRig) resync(t *testing.T) int64 {
	t.Helper()
	before := f.db.Read()
	if err := f.g.Resync(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	return f.db.Read() - before
}

// TestResyncReadsNoImages: the periodic resync of a gateway on a shared
// store reads the front's unfinished tasks' ids, states and times, and
// the records of those it holds that finished, but not the tasks' images:
// with 20 image tasks of 64 KiB another replica took, a resync that
// tells each as accepted, and one that tells each as finished, read less
// than one image.
func TestResyncReadsNoImages(t *testing.T) {
	t.Parallel()
	f := newFrontRig(t, "gw-resync-bytes")
	ctx := testCtx(t)
	const n, size = 20, 64 << 10
	body := strings.Repeat("iVBORw0KGgo", size/11+1)[:size]
	now := time.Now()
	for i := range n {
		tk := captchaq.Task{ID: "qa/" + string(rune('a'+i)), Method: "base64", Tenant: "qa", Params: map[string]string{"body": body}}
		if _, ok, err := f.other.EnqueueMarked(ctx, tk, now, gatewayMark+f.name); err != nil || !ok {
			t.Fatalf("EnqueueMarked = %v, %v", ok, err)
		}
	}
	// What reading the whole records costs: the resync before.
	before := f.db.Read()
	if err := f.g.store.Pending(ctx, func(captchaq.Record) error { return nil }); err != nil {
		t.Fatal(err)
	}
	whole := f.db.Read() - before
	accepted := f.resync(t)
	if c, m := f.g.Counts(), f.g.Metrics(); c.OthersAccepted != n || m.QueueDepth != n {
		t.Fatalf("after the resync: %d others' tasks told, %d unfinished; want %d, %d", c.OthersAccepted, m.QueueDepth, n, n)
	}
	for i := range n {
		id := "qa/" + string(rune('a'+i))
		if err := f.other.Finish(ctx, captchaq.Result{ID: id, Status: captchaq.StatusSolved, Token: "tok-" + id, FinishedAt: now}); err != nil {
			t.Fatal(err)
		}
	}
	finished := f.resync(t)
	if c, m := f.g.Counts(), f.g.Metrics(); c.OthersResults != n || m.QueueDepth != 0 || m.Solved != n {
		t.Fatalf("after the second resync: %d others' results told, %d solved, %d unfinished; want %d, %d, 0", c.OthersResults, m.Solved, m.QueueDepth, n, n)
	}
	t.Logf("%d image tasks of %d bytes: whole records %d bytes read; resync telling them accepted %d, finished %d", n, size, whole, accepted, finished)
	if whole < n*size {
		t.Fatalf("reading the whole records read %d bytes, less than the %d of the images: the relay does not count", whole, n*size)
	}
	if accepted >= size || finished >= size {
		t.Fatalf("the resyncs read %d and %d bytes, want less than one image (%d)", accepted, finished, size)
	}
}

// TestResyncThenLateNewsCountOnce: news a resync told (a task another
// replica accepted, its result) are counted once when their announcement
// comes after all (late: the announcer was slow, or the listening
// connection came back just after the commit), and news announced before
// a resync are not counted again by it.
func TestResyncThenLateNewsCountOnce(t *testing.T) {
	t.Parallel()
	f := newFrontRig(t, "gw-resync-late")
	ctx := testCtx(t)
	check := func(step string, accepted, solved, unfinished int) {
		t.Helper()
		c, m := f.g.Counts(), f.g.Metrics()
		if c.OthersAccepted != int64(accepted) || m.Submitted != int64(accepted) || m.Solved != int64(solved) ||
			c.OthersResults != int64(solved) || m.QueueDepth != unfinished {
			t.Fatalf("%s: %d accepted (%d submitted), %d solved (%d results), %d unfinished; want %d, %d, %d",
				step, c.OthersAccepted, m.Submitted, m.Solved, c.OthersResults, m.QueueDepth, accepted, solved, unfinished)
		}
	}
	accept := func(id string) {
		t.Helper()
		tk := captchaq.Task{ID: id, Method: "turnstile", Tenant: "qa", Params: map[string]string{"sitekey": "k"}}
		if _, ok, err := f.other.EnqueueMarked(ctx, tk, time.Now(), gatewayMark+f.name); err != nil || !ok {
			t.Fatalf("EnqueueMarked = %v, %v", ok, err)
		}
	}
	finish := func(id string) {
		t.Helper()
		if err := f.other.Finish(ctx, captchaq.Result{ID: id, Status: captchaq.StatusSolved, Token: "tok", FinishedAt: time.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	// Told by the resync, then announced.
	accept("qa/1")
	f.resync(t)
	check("qa/1 accepted, told by a resync", 1, 0, 1)
	f.g.OtherAccepted(ctx, "qa/1")
	check("qa/1's acceptance announced late", 1, 0, 1)
	finish("qa/1")
	f.resync(t)
	check("qa/1 solved, told by a resync", 1, 1, 0)
	f.g.OtherFinished(ctx, "qa/1")
	check("qa/1's result announced late", 1, 1, 0)
	// Announced, then read by a resync.
	accept("qa/2")
	f.g.OtherAccepted(ctx, "qa/2")
	f.resync(t)
	check("qa/2 accepted, announced, then resync", 2, 1, 1)
	finish("qa/2")
	f.g.OtherFinished(ctx, "qa/2")
	f.resync(t)
	check("qa/2 solved, announced, then resync", 2, 2, 0)
	// Announced only, as most are.
	accept("qa/3")
	f.g.OtherAccepted(ctx, "qa/3")
	finish("qa/3")
	f.g.OtherFinished(ctx, "qa/3")
	check("qa/3 announced", 3, 3, 0)
}

// TestLostFinishedNoticeHealsAtResync: a replica hears another's news
// through the shared store's Watch, wired as serve wires it, and the
// notice of one answer never reaches it (the filter below drops it, as a
// NOTIFY sent while the listener is between connections, or one that
// failed after its commit, is never delivered). The task it counted
// unfinished (its client's fair share, /v1/stats) is let go, and the
// answer told to its server once, by the next periodic resync: within
// ResyncEvery of the answer being resyncSettle old (here it is that old
// when stored, as an answer is when its notice is lost and the settling
// time has passed).
func TestLostFinishedNoticeHealsAtResync(t *testing.T) {
	t.Parallel()
	const name, every = "gw-lost-notice", 200 * time.Millisecond
	r := newGatewayRig(t, testConfig(t))
	url := pgtest.NewDatabase(t)
	ctx := testCtx(t)
	open := func(cfg postgres.Config) *postgres.Store {
		cfg.Retention = postgres.RetentionOff
		s, err := postgres.Open(ctx, url, cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s
	}
	mine, other := open(postgres.Config{}), open(postgres.Config{Notify: true})
	told := make(chan captchaq.Result, 10)
	g, _ := r.start(GatewayConfig{Store: mine, Name: name, ResyncEvery: every, Logger: testLogger(t)}, nil,
		func(captchaq.Record) {}, func(res captchaq.Result) { told <- res })
	const id = "qa/lost"
	dropped := make(chan postgres.Event, 1)
	err := mine.Watch(func(e postgres.Event) {
		switch e.Kind {
		case postgres.EventAccepted:
			g.OtherAccepted(ctx, e.ID)
		case postgres.EventFinished:
			if e.ID == id {
				dropped <- e
				return
			}
			g.OtherFinished(ctx, e.ID)
		case postgres.EventResync:
			_ = g.Resync(ctx)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	unfinished := func() (pending, held int) { return g.ledger.unfinished("qa") }

	tk := captchaq.Task{ID: id, Method: "turnstile", Tenant: "qa", Params: map[string]string{"sitekey": "k"}}
	seen, ok, err := other.EnqueueMarked(ctx, tk, time.Now(), gatewayMark+name)
	if err != nil || !ok {
		t.Fatalf("EnqueueMarked = %v, %v", ok, err)
	}
	testbound.Until(t, "the other replica's task counted unfinished", func() bool {
		p, h := unfinished()
		return p == 1 && h == 1
	})
	answer := captchaq.Result{ID: id, Status: captchaq.StatusSolved, Token: "tok-lost", FinishedAt: time.Now().Add(-resyncSettle)}
	if ok, err := other.FinishIf(ctx, answer, seen); err != nil || !ok {
		t.Fatalf("FinishIf = %v, %v", ok, err)
	}
	if e := testbound.Receive(t, "the answer's notice", dropped); e.Kind != postgres.EventFinished || e.ID != id {
		t.Fatalf("dropped %+v, want the answer's notice", e)
	}
	// Measured from the drop: the answer is resyncSettle old already, so
	// the next resync tells it. A second of slack for the read.
	start := time.Now()
	testbound.Until(t, "the lost answer's task let go", func() bool {
		p, h := unfinished()
		return p == 0 && h == 0
	})
	took, bound := time.Since(start), every+time.Second
	if took > bound {
		t.Errorf("the lost answer's task let go %v after its notice was dropped, want within %v", took, bound)
	}
	t.Logf("the lost answer's task let go %v after its notice was dropped (ResyncEvery %v)", took, every)
	res := testbound.Receive(t, "the answer told to the server", told)
	if res.ID != id || res.Status != captchaq.StatusSolved || res.Token != "tok-lost" {
		t.Errorf("told %s %s %q, want %s solved tok-lost", res.ID, res.Status, res.Token, id)
	}
	// Resyncs after it tell nothing more.
	if err := g.Resync(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case res := <-told:
		t.Errorf("told again: %s %s", res.ID, res.Status)
	default:
	}
	if c, m := g.Counts(), g.Metrics(); c.OthersAccepted != 1 || c.OthersResults != 1 || m.Solved != 1 || m.QueueDepth != 0 {
		t.Errorf("%d others' tasks, %d others' results, %d solved, %d unfinished; want 1, 1, 1, 0",
			c.OthersAccepted, c.OthersResults, m.Solved, m.QueueDepth)
	}
}
