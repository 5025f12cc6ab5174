package sim_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/captchaq/captchaq/internal/testbound"
	"github.com/captchaq/captchaq/sim"
)

func TestUtilization(t *testing.T) {
	t.Parallel()
	clock := newManualClock()
	b := setup(t, sim.Config{Threads: 2, Latency: tenSeconds(), Now: clock.Now})
	b.submit(t, recaptcha()) // t=0: A and B busy until t=10
	b.submit(t, recaptcha())
	clock.Advance(12 * time.Second)
	b.submit(t, recaptcha()) // t=12: C busy until t=22
	clock.Advance(8 * time.Second)
	b.submit(t, recaptcha()) // t=20: the window's end
	clock.Advance(30 * time.Second)

	// Within [0, 20]: A and B 10 s each, C 8 s, D 0 s: 28 thread-seconds
	// of 2 × 20 = 40. Busy time after t=20 does not count.
	st := b.srv.Stats()
	if st.WindowSeconds != 20 || st.BusyThreadSeconds != 28 || st.Utilization != 0.7 || st.PeakThreadsInUse != 2 {
		t.Fatalf("window %v busy %v utilization %v peak %d; want 20, 28, 0.7, 2",
			st.WindowSeconds, st.BusyThreadSeconds, st.Utilization, st.PeakThreadsInUse)
	}
	// Four solves of 10 s were drawn, busy or not within the window.
	if st.SolveSecondsDrawn != 40 || st.SolveSecondsLongest != 10 {
		t.Fatalf("drawn %v longest %v; want 40 and 10", st.SolveSecondsDrawn, st.SolveSecondsLongest)
	}

	b.srv.ResetStats()
	if st := b.srv.Stats(); st.Accepted != 0 || st.Utilization != 0 || st.WindowSeconds != 0 || st.Calls.Submit != 0 {
		t.Fatalf("after ResetStats: %+v", st)
	}
}

func TestReadyToFetched(t *testing.T) {
	t.Parallel()
	clock := newManualClock()
	b := setup(t, sim.Config{Threads: 10, Latency: tenSeconds(), Now: clock.Now})
	var ids []string
	for range 4 {
		ids = append(ids, b.submit(t, recaptcha()))
	}
	clock.Advance(10 * time.Second) // all solved at t=10
	for i, id := range ids {
		clock.Advance(time.Duration(i+1) * time.Second) // fetched 1, 3, 6, 10 s after the solve
		b.poll(t, id)
		b.poll(t, id) // a second delivery is not counted again
	}
	st := b.srv.Stats()
	want := sim.Quantiles{Count: 4, Mean: 5, P50: 3, P90: 10, P99: 10, Max: 10} // mean (1+3+6+10)/4
	if diff := cmp.Diff(want, st.ReadyToFetched); diff != "" {
		t.Fatalf("ready_to_fetched (-want +got):\n%s", diff)
	}
	if st.Fetched != 4 || st.Calls.PollSingle != 8 || st.IDsPolled != 8 {
		t.Fatalf("fetched %d poll calls %d ids %d; want 4, 8, 8", st.Fetched, st.Calls.PollSingle, st.IDsPolled)
	}
}

func TestDuplicates(t *testing.T) {
	t.Parallel()
	b := setup(t, sim.Config{Threads: 10, Instant: true})
	// Same task three times: key, json, soft_id, pingback and name case
	// differ, which does not make it another task.
	b.submit(t, recaptcha())
	b.submit(t, recaptcha("soft_id", "42", "pingback", "http://127.0.0.1:1/cb"))
	v := recaptcha()
	v.Del("googlekey")
	v.Set("GoogleKey", "6Le-wvkSAAAAAPBMRTvw0Q4Muexq9bi0DJwx_mJ-")
	b.submit(t, v)
	b.submit(t, recaptcha("pageurl", "https://shop.example/other"))
	b.post(t, "/in.php", recaptcha("googlekey", "")) // rejected: not counted

	st := b.srv.Stats()
	if st.Duplicates != 2 || st.Accepted != 4 {
		t.Fatalf("duplicates %d accepted %d; want 2 and 4", st.Duplicates, st.Accepted)
	}
	fp := sim.Fingerprint("userrecaptcha", map[string]string{
		"googlekey": "6Le-wvkSAAAAAPBMRTvw0Q4Muexq9bi0DJwx_mJ-", "pageurl": "https://shop.example/login", "key": "other",
	}, nil)
	if n := b.srv.SubmissionsOf(fp); n != 3 {
		t.Fatalf("SubmissionsOf = %d, want 3", n)
	}
	other := sim.Fingerprint("userrecaptcha", map[string]string{
		"googlekey": "6Le-wvkSAAAAAPBMRTvw0Q4Muexq9bi0DJwx_mJ-", "pageurl": "https://shop.example/other",
	}, nil)
	if n := b.srv.SubmissionsOf(other); n != 1 {
		t.Fatalf("SubmissionsOf(other) = %d, want 1", n)
	}
}

func TestCallCounts(t *testing.T) {
	t.Parallel()
	b := setup(t, sim.Config{Threads: 10, Instant: true})
	id := b.submit(t, recaptcha())
	b.poll(t, id)
	b.get(t, "/res.php", form("key", key, "action", "get", "ids", id+","+id))
	b.get(t, "/res.php", form("key", key, "action", "getbalance"))
	b.get(t, "/res.php", form("key", key, "action", "reportgood", "id", id))
	b.get(t, "/res.php", form("key", key, "action", "threadsinfo"))
	b.get(t, "/res.php", form("key", key, "action", "nosuch"))
	resp, err := http.Get(b.base + "/favicon.ico")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	want := sim.Calls{Submit: 1, PollSingle: 1, PollBulk: 1, Balance: 1, Report: 1, ThreadsInfo: 1, Other: 2}
	st := b.srv.Stats()
	if diff := cmp.Diff(want, st.Calls); diff != "" {
		t.Fatalf("calls (-want +got):\n%s", diff)
	}
	// The one task was asked for once alone and twice in the bulk poll.
	if st.MaxPollsPerTask != 3 {
		t.Fatalf("max polls per task %d, want 3", st.MaxPollsPerTask)
	}
}

// TestStatsJSON pins the field names a benchmark harness reads.
func TestStatsJSON(t *testing.T) {
	t.Parallel()
	b := setup(t, sim.Config{Threads: 4, Instant: true})
	b.submit(t, recaptcha())
	resp, err := http.Get(b.base + "/sim/stats")
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal([]byte(readBody(t, resp)), &doc); err != nil {
		t.Fatal(err)
	}
	keys := func(m map[string]any) []string {
		var ks []string
		for k := range m {
			ks = append(ks, k)
		}
		slices.Sort(ks)
		return ks
	}
	want := []string{"accepted", "bans", "busy_thread_seconds", "calls", "duplicates", "faults", "fetched", "ids_polled",
		"max_polls_per_task", "no_slot", "peak_threads_in_use", "pingbacks_failed", "pingbacks_sent", "ready_to_fetched", "refused", "reports_bad",
		"reports_good", "solve_seconds_drawn", "solve_seconds_longest", "solved", "spent", "tasks_kept", "threads", "threads_in_use", "too_many_requests", "unsolvable", "utilization", "window_seconds"}
	if diff := cmp.Diff(want, keys(doc)); diff != "" {
		t.Fatalf("stats keys (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"balance", "createtask", "other", "poll_bulk", "poll_single", "report", "submit", "threadsinfo"}, keys(doc["calls"].(map[string]any))); diff != "" {
		t.Fatalf("calls keys:\n%s", diff)
	}
	if diff := cmp.Diff([]string{"dropped", "http_5xx", "slow", "total"}, keys(doc["faults"].(map[string]any))); diff != "" {
		t.Fatalf("faults keys:\n%s", diff)
	}
	if diff := cmp.Diff([]string{"count", "max_seconds", "mean_seconds", "p50_seconds", "p90_seconds", "p99_seconds"}, keys(doc["ready_to_fetched"].(map[string]any))); diff != "" {
		t.Fatalf("ready_to_fetched keys:\n%s", diff)
	}
	if doc["accepted"] != 1.0 || doc["threads"] != 4.0 {
		t.Fatalf("accepted %v threads %v", doc["accepted"], doc["threads"])
	}

	resp, err = http.Post(b.base+"/sim/stats/reset", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	if body := readBody(t, resp); !strings.Contains(body, `"accepted": 0`) {
		t.Fatalf("reset answered %s", body)
	}
}

// pingbackReceiver records pingback calls.
type pingbackReceiver struct {
	srv   *httptest.Server
	calls chan map[string]string
}

func newPingbackReceiver(t *testing.T) *pingbackReceiver {
	p := &pingbackReceiver{calls: make(chan map[string]string, 100)}
	p.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.ParseForm() != nil {
			http.Error(w, "want a POST form", http.StatusBadRequest)
			return
		}
		p.calls <- map[string]string{"id": r.PostForm.Get("id"), "code": r.PostForm.Get("code"), "path": r.URL.Path}
	}))
	t.Cleanup(p.srv.Close)
	return p
}

func TestPingback(t *testing.T) {
	t.Parallel()
	recv := newPingbackReceiver(t)
	b := setup(t, sim.Config{Threads: 10, LatencyScale: 0.001, UnsolvableRate: 0})
	sent := map[string]bool{}
	for range 3 {
		sent[b.submit(t, recaptcha("pingback", recv.srv.URL+"/cb"))] = true
	}
	plain := b.submit(t, recaptcha()) // no pingback asked: none sent
	got := map[string]string{}
	for range 3 {
		c := <-recv.calls
		if !sent[c["id"]] || c["path"] != "/cb" {
			t.Fatalf("pingback %v for an id not submitted with a pingback", c)
		}
		got[c["id"]] = c["code"]
	}
	for id, code := range got {
		if tok := b.poll(t, id).str(t); tok != code {
			t.Fatalf("pingback code for %s differs from the polled token", id)
		}
	}
	testbound.Until(t, "3 pingbacks sent", func() bool { return b.srv.Stats().PingbacksSent == 3 })
	for b.poll(t, plain).Status != 1 {
		// solved within ~25 ms at this scale; each poll is a real round trip
	}
	st := b.srv.Stats()
	if st.PingbacksSent != 3 || st.PingbacksFailed != 0 || st.ReadyToFetched.Count != 4 || st.Fetched != 4 {
		t.Fatalf("pingbacks %d failed %d delivered %d fetched %d; want 3, 0, 4, 4",
			st.PingbacksSent, st.PingbacksFailed, st.ReadyToFetched.Count, st.Fetched)
	}
	select {
	case c := <-recv.calls:
		t.Fatalf("unexpected pingback %v", c)
	default:
	}
}

func TestPingbackUnsolvable(t *testing.T) {
	t.Parallel()
	recv := newPingbackReceiver(t)
	b := setup(t, sim.Config{Threads: 10, Instant: true, UnsolvableRate: 1})
	id := b.submit(t, recaptcha("pingback", recv.srv.URL))
	c := <-recv.calls
	if c["id"] != id || c["code"] != "ERROR_CAPTCHA_UNSOLVABLE" {
		t.Fatalf("pingback %v, want id %s with ERROR_CAPTCHA_UNSOLVABLE", c, id)
	}
}

func TestCloseEndsSlowCalls(t *testing.T) {
	t.Parallel()
	srv, base, err := sim.Start(sim.Config{Threads: 5, Faults: sim.Faults{SlowRate: 1, SlowDelay: time.Hour}}, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(base, "http://127.0.0.1:") {
		t.Fatalf("base URL %q", base)
	}
	slowDone := make(chan error, 1)
	go func() {
		resp, err := http.PostForm(base+"/in.php", recaptcha())
		if err == nil {
			resp.Body.Close()
		}
		slowDone <- err
	}()
	testbound.Until(t, "one slow fault", func() bool { return srv.Stats().Faults.Slow == 1 })
	srv.Close() // must not wait the hour
	<-slowDone
	srv.Close() // twice is fine
}

func TestCloseCancelsPingback(t *testing.T) {
	t.Parallel()
	started := make(chan struct{})
	var once sync.Once
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = r.ParseForm() // read the body, so net/http notices the client leaving
		once.Do(func() { close(started) })
		<-r.Context().Done() // never answers
	}))
	defer recv.Close()
	srv, err := sim.New(sim.Config{Threads: 5, Instant: true})
	if err != nil {
		t.Fatal(err)
	}
	req := httptest.NewRequest(http.MethodPost, "/in.php", strings.NewReader(recaptcha("pingback", recv.URL).Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	rec := httptest.NewRecorder()
	srv.ServeHTTP(rec, req)
	if !strings.Contains(rec.Body.String(), `"status":1`) {
		t.Fatalf("submit: %s", rec.Body)
	}
	<-started
	srv.Close() // cancels the call in flight; goleak checks nothing is left
	if st := srv.Stats(); st.PingbacksFailed != 1 || st.PingbacksSent != 0 {
		t.Fatalf("pingbacks sent %d failed %d, want 0 and 1", st.PingbacksSent, st.PingbacksFailed)
	}
}
