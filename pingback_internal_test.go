package captchaq

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/captchaq/captchaq/internal/pingback"
	"github.com/captchaq/captchaq/internal/testbound"
)

// servePingback serves one in.php pingback of id and code at u and
// returns the status and the answer.
func servePingback(q *Queue, u, id, code string) (int, string) {
	rec := httptest.NewRecorder()
	q.PingbackHandler().ServeHTTP(rec, httptest.NewRequest("GET", u+"&id="+id+"&code="+code, nil))
	return rec.Code, rec.Body.String()
}

// nextResult waits for one result; an hour of fake time means none came.
func nextResult(t *testing.T, results <-chan Result) Result {
	t.Helper()
	select {
	case r := <-results:
		return r
	case <-time.After(time.Hour):
		t.Fatal("no result after an hour of fake time")
		return Result{}
	}
}

// A pingback for an id its provider has not given out yet (the answer beat
// our checkpoint) finishes the task that gets that id within
// pingback.EarlyTTL, not after: an older one is dropped, counted for its
// provider, and the task is polled for its own answer. The clock is
// synctest's.
func TestEarlyPingbackKeptSeconds(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		a := &scriptedLane{prefix: "X", poll: answerAll("token-polled-at-a")}
		b := &scriptedLane{prefix: "Y", poll: answerAll("token-polled-at-b")}
		results := make(chan Result, 4)
		q := startTwoLanes(t, NewMemoryStore(MemoryStoreConfig{}), a, b, results)
		aURL := q.inboxes[0].URL()

		// X1 answered 1 ns before the TTL ends: applied.
		if code, body := servePingback(q, aURL, "X1", "token-early"); code != http.StatusOK || body != "OK" {
			t.Fatalf("early pingback: %d %q", code, body)
		}
		testbound.Advance(pingback.EarlyTTL - time.Nanosecond)
		if _, err := q.Submit(t.Context(), turnstileTask("t1")); err != nil {
			t.Fatal(err)
		}
		if r := nextResult(t, results); r.ID != "t1" || r.Provider != "a" || r.CaptchaID != "X1" || r.Token != "token-early" || r.SolveSeconds != 0 {
			t.Errorf("t1: %+v; want solved at a as X1 by the early pingback, in 0 s (not before its submit)", r)
		}

		// X2 answered the TTL before its checkpoint: dropped, polled.
		if code, _ := servePingback(q, aURL, "X2", "token-stale"); code != http.StatusOK {
			t.Fatalf("early pingback: %d", code)
		}
		testbound.Advance(pingback.EarlyTTL)
		if _, err := q.Submit(t.Context(), turnstileTask("t2")); err != nil {
			t.Fatal(err)
		}
		if r := nextResult(t, results); r.ID != "t2" || r.Provider != "a" || r.CaptchaID != "X2" || r.Token != "token-polled-at-a" {
			t.Errorf("t2: %+v; want solved at a as X2 by a poll, the stale pingback dropped", r)
		}
		m := q.Metrics().Providers
		if m[0].EarlyPingbacksDropped != 1 || m[1].EarlyPingbacksDropped != 0 {
			t.Errorf("early pingbacks dropped: a %d, b %d; want 1, 0", m[0].EarlyPingbacksDropped, m[1].EarlyPingbacksDropped)
		}
	})
}

// Early pingbacks are bounded per provider: past pingback.EarlyMax kept
// for one provider, its next is dropped and counted there, while another
// provider's early pingback is still kept and finishes its task.
func TestEarlyPingbacksBoundedPerProvider(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		a := &scriptedLane{prefix: "X", poll: answerAll("token-polled-at-a")}
		b := &scriptedLane{prefix: "Y", poll: answerAll("token-polled-at-b")}
		results := make(chan Result, 4)
		q := startTwoLanes(t, NewMemoryStore(MemoryStoreConfig{}), a, b, results)
		aURL, bURL := q.inboxes[0].URL(), q.inboxes[1].URL()
		for i := range pingback.EarlyMax + 1 {
			if code, _ := servePingback(q, bURL, fmt.Sprintf("never%d", i), "token-flood"); code != http.StatusOK {
				t.Fatalf("pingback %d at b: %d", i, code)
			}
		}
		if code, _ := servePingback(q, aURL, "X1", "token-early"); code != http.StatusOK {
			t.Fatalf("early pingback at a: %d", code)
		}
		keptA, _ := q.inboxes[0].Counts()
		keptB, _ := q.inboxes[1].Counts()
		m := q.Metrics().Providers
		if keptA != 1 || keptB != pingback.EarlyMax || m[0].EarlyPingbacksDropped != 0 || m[1].EarlyPingbacksDropped != 1 {
			t.Errorf("kept a %d, b %d; dropped a %d, b %d; want 1, %d, 0, 1", keptA, keptB, m[0].EarlyPingbacksDropped, m[1].EarlyPingbacksDropped, pingback.EarlyMax)
		}
		if _, err := q.Submit(t.Context(), turnstileTask("t1")); err != nil {
			t.Fatal(err)
		}
		if r := nextResult(t, results); r.ID != "t1" || r.Provider != "a" || r.Token != "token-early" {
			t.Errorf("t1: %+v; want solved at a by its early pingback", r)
		}
	})
}

// A pingback is believed only with its provider's secret: naming a with
// b's secret, with none, or with a's secret altered is refused with 403
// and finishes nothing; a's own URL finishes a's task.
func TestPingbackNeedsItsProvidersSecret(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		a := &scriptedLane{prefix: "X", poll: answerAll("token-polled-at-a")}
		b := &scriptedLane{prefix: "X", poll: answerAll("token-polled-at-b")}
		results := make(chan Result, 4)
		q := startTwoLanes(t, NewMemoryStore(MemoryStoreConfig{}), a, b, results)
		if _, err := q.Submit(t.Context(), turnstileTask("t1")); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		aSig, bSig := q.inboxes[0].Sig(), q.inboxes[1].Sig()
		altered := aSig[:len(aSig)-1] + map[bool]string{true: "1", false: "0"}[aSig[len(aSig)-1] == '0']
		const noSig = "sig is missing or not the provider's: give each provider the pingback URL its submits carry\n"
		for what, u := range map[string]string{
			"b's secret":          "https://example.com/pingback?provider=a&sig=" + bSig,
			"no secret":           "https://example.com/pingback?provider=a",
			"a's secret altered":  "https://example.com/pingback?provider=a&sig=" + altered,
			"a's secret cut at 8": "https://example.com/pingback?provider=a&sig=" + aSig[:8],
		} {
			if code, body := servePingback(q, u, "X1", "FORGED"); code != http.StatusForbidden || body != noSig {
				t.Errorf("a named with %s: %d %q, want 403 %q", what, code, body, noSig)
			}
		}
		synctest.Wait()
		if len(results) != 0 || q.table.Counts().InFlight != 1 {
			t.Fatalf("after the forged pingbacks: %d results, %d in flight; want none, t1", len(results), q.table.Counts().InFlight)
		}
		if code, _ := servePingback(q, q.inboxes[0].URL(), "X1", "token-from-a-pingback"); code != http.StatusOK {
			t.Fatalf("a's pingback: %d", code)
		}
		if r := nextResult(t, results); r.ID != "t1" || r.Provider != "a" || r.Token != "token-from-a-pingback" {
			t.Errorf("t1: %+v; want a's pingback answer", r)
		}
	})
}

// The secret each provider's URL carries is keyed by Config.PingbackSecret:
// a queue started again with the same secret gives each provider the same
// URL (its pingbacks still believed), and two providers, or two secrets,
// never share one. Without a secret each queue draws its own.
func TestPingbackSecretKeysTheURL(t *testing.T) {
	t.Parallel()
	urls := func(secret []byte) []string {
		q, err := New(Config{
			Providers: []ProviderConfig{
				{Name: "a", Provider: &scriptedLane{prefix: "X"}},
				{Name: "b", Provider: &scriptedLane{prefix: "Y"}},
			},
			PingbackURL: "https://example.com/pingback/s3", PingbackSecret: secret,
		})
		if err != nil {
			t.Fatal(err)
		}
		return []string{q.inboxes[0].URL(), q.inboxes[1].URL()}
	}
	one, two := []byte("0123456789abcdef"), []byte("0123456789abcdeF")
	first, again, other, drawn, drawnAgain := urls(one), urls(one), urls(two), urls(nil), urls(nil)
	seen := map[string]string{}
	for what, u := range map[string]string{"a": first[0], "b": first[1], "a, other secret": other[0], "b, other secret": other[1],
		"a, drawn": drawn[0], "b, drawn": drawn[1], "a, drawn again": drawnAgain[0], "b, drawn again": drawnAgain[1]} {
		if o, dup := seen[u]; dup {
			t.Errorf("%s and %s share a URL", what, o)
		}
		seen[u] = what
	}
	if again[0] != first[0] || again[1] != first[1] {
		t.Error("the same secret gave other URLs")
	}
	if !strings.HasPrefix(first[0], "https://example.com/pingback/s3?provider=a&sig=") || len(first[0]) != len("https://example.com/pingback/s3?provider=a&sig=")+64 {
		t.Errorf("a's URL is not the base, provider=a and a 64-digit sig: %d characters", len(first[0]))
	}
}
