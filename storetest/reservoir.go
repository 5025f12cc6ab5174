package storetest

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/provider"
)

// reservoirOf is s as a ReservoirStore; the test is skipped for a Store
// without one.
func reservoirOf(t *testing.T, s captchaq.Store) captchaq.ReservoirStore {
	t.Helper()
	return optional[captchaq.ReservoirStore](t, s, "reservoir tokens")
}

// token is a reservoir's token for id, solved at t0 and expiring at
// expires.
func token(id string, expires time.Time) captchaq.Result {
	r := solved(id, 1, t0)
	r.Token = "0.res-" + id
	r.ExpiresAt = expires
	return r
}

func stock(t *testing.T, rs captchaq.ReservoirStore, name string, tokens ...captchaq.Result) {
	t.Helper()
	for _, r := range tokens {
		if err := rs.StockToken(context.Background(), name, r); err != nil {
			t.Fatalf("StockToken(%q, %q): %v", name, r.ID, err)
		}
	}
}

// takeToken takes from reservoir name the token expiring first at or
// after notBefore: its ID, or "" for none.
func takeToken(t *testing.T, rs captchaq.ReservoirStore, name string, notBefore time.Time) string {
	t.Helper()
	r, ok, err := rs.TakeToken(context.Background(), name, notBefore)
	if err != nil {
		t.Fatalf("TakeToken(%q): %v", name, err)
	}
	if !ok {
		if r.ID != "" {
			t.Errorf("TakeToken(%q) found none but returned %q", name, r.ID)
		}
		return ""
	}
	// Times come back to within a millisecond.
	if r.Status != captchaq.StatusSolved || r.ExpiresAt.Before(notBefore.Add(-time.Millisecond)) {
		t.Errorf("TakeToken(%q, %v) returned %q, %s, expiring %v", name, notBefore, r.ID, r.Status, r.ExpiresAt)
	}
	return r.ID
}

func tokenCounts(t *testing.T, rs captchaq.ReservoirStore) map[string]int {
	t.Helper()
	counts, err := rs.TokenCounts(context.Background())
	if err != nil {
		t.Fatalf("TokenCounts: %v", err)
	}
	return counts
}

// testTokenTakenOnce: a stocked token is taken once; the next take finds
// none.
func testTokenTakenOnce(t *testing.T, s captchaq.Store) {
	rs := reservoirOf(t, s)
	if got := takeToken(t, rs, "ts", t0); got != "" {
		t.Fatalf("TakeToken of an empty reservoir took %q", got)
	}
	stock(t, rs, "ts", token("a", at(time.Minute)))
	if got := takeToken(t, rs, "ts", t0); got != "a" {
		t.Fatalf("TakeToken took %q, want a", got)
	}
	if got := takeToken(t, rs, "ts", t0); got != "" {
		t.Errorf("a second TakeToken took %q, want none", got)
	}
}

// testTakeExpiringFirst: a take picks the token that expires first among
// those expiring at or after notBefore, and never one expiring before.
func testTakeExpiringFirst(t *testing.T, s captchaq.Store) {
	rs := reservoirOf(t, s)
	stock(t, rs, "ts",
		token("late", at(5*time.Minute)), token("early", at(30*time.Second)),
		token("mid", at(2*time.Minute)), token("edge", at(time.Minute)))
	// notBefore at(time.Minute): early expires before it, edge exactly at it.
	var got []string
	for range 5 { // one more than there are: a store that keeps one shows
		if id := takeToken(t, rs, "ts", at(time.Minute)); id != "" {
			got = append(got, id)
		}
	}
	if want := []string{"edge", "mid", "late"}; !slices.Equal(got, want) {
		t.Errorf("takes at notBefore t0+1m: %v, want %v", got, want)
	}
	if counts := tokenCounts(t, rs); !maps.Equal(counts, map[string]int{"ts": 1}) {
		t.Errorf("TokenCounts after the takes: %v, want the early token left, map[ts:1]", counts)
	}
}

// testStockKnownIDLeavesIt: StockToken of an ID stocked already leaves
// the first token.
func testStockKnownIDLeavesIt(t *testing.T, s captchaq.Store) {
	rs := reservoirOf(t, s)
	first := token("a", at(time.Minute))
	second := token("a", at(time.Hour))
	second.Token = "0.other"
	stock(t, rs, "ts", first, second)
	if counts := tokenCounts(t, rs); !maps.Equal(counts, map[string]int{"ts": 1}) {
		t.Errorf("TokenCounts after stocking one ID twice: %v, want map[ts:1]", counts)
	}
	r, ok, err := rs.TakeToken(context.Background(), "ts", t0)
	if err != nil || !ok {
		t.Fatalf("TakeToken: %v, %v", ok, err)
	}
	if d := diff(first, r); d != "" {
		t.Errorf("the token of an ID stocked twice (-first +got):\n%s", d)
	}
}

// testStockRefusesUnstockable: a result that is not solved, or has no
// ExpiresAt, is refused with Result.CheckStockable's error, and nothing
// is stocked.
func testStockRefusesUnstockable(t *testing.T, s captchaq.Store) {
	rs := reservoirOf(t, s)
	noExpiry := token("noexp", time.Time{})
	for _, r := range []captchaq.Result{failed("failed", "ERROR_CAPTCHA_UNSOLVABLE", 1, t0), noExpiry} {
		want := r.CheckStockable()
		if want == nil {
			t.Fatalf("CheckStockable accepts %q, %s, expiring %v", r.ID, r.Status, r.ExpiresAt)
		}
		err := rs.StockToken(context.Background(), "ts", r)
		if err == nil || err.Error() != want.Error() {
			t.Errorf("StockToken(%q): %v, want %v", r.ID, err, want)
		}
	}
	if counts := tokenCounts(t, rs); len(counts) != 0 {
		t.Errorf("TokenCounts after refused stocks: %v, want none", counts)
	}
}

// testDropTokens: DropTokens removes exactly the reservoir's tokens
// expiring before its cutoff (one expiring at it stays) and counts them.
func testDropTokens(t *testing.T, s captchaq.Store) {
	rs := reservoirOf(t, s)
	stock(t, rs, "ts", token("a", at(10*time.Second)), token("b", at(20*time.Second)),
		token("c", at(30*time.Second)), token("d", at(time.Minute)))
	stock(t, rs, "rc", token("x", at(time.Second)))
	n, err := rs.DropTokens(context.Background(), "ts", at(30*time.Second))
	if err != nil || n != 2 {
		t.Fatalf("DropTokens before t0+30s: %d, %v; want 2 (a and b)", n, err)
	}
	if n, err := rs.DropTokens(context.Background(), "ts", at(30*time.Second)); err != nil || n != 0 {
		t.Errorf("a second DropTokens: %d, %v; want 0", n, err)
	}
	if counts := tokenCounts(t, rs); !maps.Equal(counts, map[string]int{"ts": 2, "rc": 1}) {
		t.Errorf("TokenCounts after DropTokens: %v, want map[rc:1 ts:2]", counts)
	}
	if got := takeToken(t, rs, "ts", t0); got != "c" {
		t.Errorf("TakeToken after DropTokens took %q, want c (at the cutoff, kept)", got)
	}
}

// testReservoirsSeparate: each reservoir has its own stock and counts,
// the same ID in two of them included; one with none is not counted.
func testReservoirsSeparate(t *testing.T, s captchaq.Store) {
	rs := reservoirOf(t, s)
	stock(t, rs, "ts", token("a", at(time.Minute)), token("b", at(time.Minute)))
	stock(t, rs, "rc", token("a", at(2*time.Minute)))
	if counts := tokenCounts(t, rs); !maps.Equal(counts, map[string]int{"ts": 2, "rc": 1}) {
		t.Errorf("TokenCounts: %v, want map[rc:1 ts:2]", counts)
	}
	if got := takeToken(t, rs, "gt", t0); got != "" {
		t.Errorf("TakeToken of a reservoir never stocked took %q", got)
	}
	r, ok, err := rs.TakeToken(context.Background(), "rc", t0)
	if err != nil || !ok || diff(at(2*time.Minute), r.ExpiresAt) != "" {
		t.Fatalf("TakeToken(rc): %v, %v, expiring %v; want rc's a, expiring t0+2m", ok, err, r.ExpiresAt)
	}
	if counts := tokenCounts(t, rs); !maps.Equal(counts, map[string]int{"ts": 2}) {
		t.Errorf("TokenCounts with rc empty: %v, want map[ts:2]", counts)
	}
	if n, err := rs.DropTokens(context.Background(), "rc", at(time.Hour)); err != nil || n != 0 {
		t.Errorf("DropTokens(rc) of an empty reservoir: %d, %v; want 0", n, err)
	}
	if got := takeToken(t, rs, "rc", t0); got != "" {
		t.Errorf("TakeToken(rc) took %q of another reservoir", got)
	}
}

// testTokenRoundTrip: a token comes back whole, its Answer byte for
// byte.
func testTokenRoundTrip(t *testing.T, s captchaq.Store) {
	rs := reservoirOf(t, s)
	want := captchaq.Result{
		ID: "gt-1", Status: captchaq.StatusSolved, Method: "geetest_v4", Kind: provider.KindGeeTest,
		Token:        "tok \"quoted\" ü",
		Answer:       json.RawMessage(`{"captcha_id": "e392", "lot_number":"7bb9",  "gen_time": 1726}`),
		Attempts:     2,
		CaptchaID:    "c1",
		SolveSeconds: 12.345678,
		Provider:     "backup",
		Price:        0.00299,
		Abandoned:    []string{"main", "spare"},
		ExpiresAt:    at(time.Minute + 1500*time.Microsecond),
		AcceptedAt:   t0,
		SubmittedAt:  at(1500 * time.Millisecond),
		FinishedAt:   at(13*time.Second + 999*time.Millisecond),
	}
	stock(t, rs, "gt", want)
	got, ok, err := rs.TakeToken(context.Background(), "gt", t0)
	if err != nil || !ok {
		t.Fatalf("TakeToken: %v, %v", ok, err)
	}
	if d := diff(want, got); d != "" {
		t.Errorf("the token taken (-stocked +taken):\n%s", d)
	}
	if string(got.Answer) != string(want.Answer) {
		t.Errorf("Answer = %s, want %s byte for byte", got.Answer, want.Answer)
	}
}

// testTokensTakenOnceConcurrently runs TokensTakenOnce on s alone.
func testTokensTakenOnceConcurrently(t *testing.T, s captchaq.Store) {
	TokensTakenOnce(t, reservoirOf(t, s))
}

// TokensTakenOnce stocks 50 tokens in one reservoir through stores[0],
// has 8 goroutines take from it at once until it is empty, goroutine i
// through stores[i%len(stores)], and fails t unless each token was
// taken exactly once, and that a take found none only when the other
// takers held what was left. A store whose processes share one database
// (the replicas of a front) passes it one Store each, open on it.
func TokensTakenOnce(t *testing.T, stores ...captchaq.ReservoirStore) {
	t.Helper()
	const n, takers = 50, 8
	want := make([]string, n)
	for i := range n {
		want[i] = fmt.Sprintf("tok-%02d", i)
		stock(t, stores[0], "ts", token(want[i], at(time.Duration(n-i)*time.Second)))
	}
	var mu sync.Mutex
	var got []string
	var wg sync.WaitGroup
	for i := range takers {
		rs := stores[i%len(stores)]
		wg.Go(func() {
			for range n { // more would take a token twice
				r, ok, err := rs.TakeToken(context.Background(), "ts", t0)
				if err != nil {
					t.Errorf("concurrent TakeToken: %v", err)
					return
				}
				if !ok {
					// The stock only shrinks: a take that finds none leaves
					// at most the tokens the other takers are taking.
					if counts, err := rs.TokenCounts(context.Background()); err != nil || counts["ts"] >= takers {
						t.Errorf("a TakeToken found none with %v left (%v), more than %d other takers could hold", counts, err, takers-1)
					}
					return
				}
				mu.Lock()
				got = append(got, r.ID)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("%d takers at once took %d tokens: %v; want each of the %d once", takers, len(got), got, n)
	}
	if counts := tokenCounts(t, stores[0]); len(counts) != 0 {
		t.Errorf("TokenCounts after every token was taken: %v, want none", counts)
	}
}

// optionalCallsAfterClose are the calls of the optional interfaces s
// implements (PingbackLedger, ReservoirStore, StateStore), for
// testClosed.
func optionalCallsAfterClose(s captchaq.Store) map[string]error {
	ctx := context.Background()
	calls := map[string]error{}
	if l, ok := s.(captchaq.PingbackLedger); ok {
		_, _, calls["TakePingback"] = l.TakePingback(ctx, "a", time.Hour)
		_, calls["ClaimPingbacks"] = l.ClaimPingbacks(ctx, 0, time.Hour, 10)
		calls["PingbackDone"] = l.PingbackDone(ctx, "a")
	}
	if rs, ok := s.(captchaq.ReservoirStore); ok {
		calls["StockToken"] = rs.StockToken(ctx, "ts", token("a", at(time.Minute)))
		_, _, calls["TakeToken"] = rs.TakeToken(ctx, "ts", t0)
		_, calls["DropTokens"] = rs.DropTokens(ctx, "ts", t0)
		_, calls["TokenCounts"] = rs.TokenCounts(ctx)
	}
	if ss, ok := s.(captchaq.StateStore); ok {
		_, calls["LoadState"] = ss.LoadState(ctx, "type_refusals")
		calls["SaveState"] = ss.SaveState(ctx, "type_refusals", []byte("[]"))
	}
	return calls
}

// BenchTakeToken stocks b.N tokens through stores[0], all expiring at
// one time, and times their takes by takers goroutines at once, each
// through one of stores in turn, in takes/s.
func BenchTakeToken(b *testing.B, takers int, stores ...captchaq.ReservoirStore) {
	now := time.Now()
	for i := range b.N {
		r := token(fmt.Sprintf("tok-%d", i), now.Add(time.Hour))
		if err := stores[0].StockToken(b.Context(), "ts", r); err != nil {
			b.Fatal(err)
		}
	}
	var next atomic.Int64
	b.ResetTimer()
	b.SetParallelism((takers + runtime.GOMAXPROCS(0) - 1) / runtime.GOMAXPROCS(0))
	b.RunParallel(func(pb *testing.PB) {
		rs := stores[int(next.Add(1))%len(stores)]
		for pb.Next() {
			if _, ok, err := rs.TakeToken(b.Context(), "ts", now); err != nil || !ok {
				b.Errorf("TakeToken: %v, %v", ok, err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "takes/s")
}
