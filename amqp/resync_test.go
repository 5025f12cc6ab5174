package amqp

import (
	"strings"
	"testing"
	"time"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/internal/pgtest"
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
