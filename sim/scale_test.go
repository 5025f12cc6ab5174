package sim_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/captchaq/captchaq/internal/testbound"
	"github.com/captchaq/captchaq/sim"
)

// direct calls the handler in-process, without a network round trip.
func direct(srv *sim.Server, path string, v url.Values) string {
	req := httptest.NewRequest(http.MethodPost, path, strings.NewReader(v.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	rec := httptest.NewRecorder()
	srv.ServeHTTP(rec, req)
	return rec.Body.String()
}

// runLoad keeps every thread busy with tasks until total were fetched,
// polling in bulk, and returns the stats.
func runLoad(tb testing.TB, srv *sim.Server, threads, total int) sim.Stats {
	submit := recaptcha()
	var inFlight []string
	submitted, fetched := 0, 0
	ctx := testbound.Context(tb)
	pace := time.NewTicker(time.Millisecond)
	defer pace.Stop()
	for fetched < total {
		for submitted < total && len(inFlight) < threads {
			var a answer
			if err := json.Unmarshal([]byte(direct(srv, "/in.php", submit)), &a); err != nil {
				tb.Fatal(err)
			}
			if a.Status != 1 {
				break // no slot: poll first
			}
			var id string
			_ = json.Unmarshal(a.Request, &id)
			inFlight = append(inFlight, id)
			submitted++
		}
		var still []string
		for i := 0; i < len(inFlight); i += 100 {
			chunk := inFlight[i:min(i+100, len(inFlight))]
			body := direct(srv, "/res.php", form("key", key, "action", "get", "ids", strings.Join(chunk, ",")))
			for j, part := range strings.Split(body, "|") {
				if part == "CAPCHA_NOT_READY" {
					still = append(still, chunk[j])
				} else {
					fetched++
				}
			}
		}
		if len(still) == len(inFlight) && submitted == total || len(still) == threads {
			// Nothing to do until the next solve: the client's pause.
			select {
			case <-pace.C:
			case <-ctx.Done():
				tb.Fatalf("%d of %d tasks fetched after %v", fetched, total, testbound.Bound)
			}
		}
		inFlight = still
	}
	return srv.Stats()
}

func TestScale(t *testing.T) {
	t.Parallel()
	const threads, total = 2000, 10000
	srv, err := sim.New(sim.Config{Threads: threads, LatencyScale: 0.001, Seed: 5,
		PollBan: sim.PollBan{Disabled: true}, FetchedRetention: time.Millisecond, ResultTTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	st := runLoad(t, srv, threads, total)
	if st.Accepted != total || st.Solved != total || st.Fetched != total || st.PeakThreadsInUse > threads || st.Duplicates != total-1 {
		t.Fatalf("accepted %d solved %d fetched %d peak %d duplicates %d", st.Accepted, st.Solved, st.Fetched, st.PeakThreadsInUse, st.Duplicates)
	}
	// Fetched tasks are forgotten a millisecond after delivery.
	testbound.Until(t, "no task kept", func() bool { return srv.Stats().TasksKept == 0 })
}

// BenchmarkLoad runs 5,000 threads through b.N×1000 tasks of reCAPTCHA at
// 1/1000 of real latency and reports memory held at the end.
func BenchmarkLoad(b *testing.B) {
	const threads = 5000
	total := b.N * 1000
	srv, err := sim.New(sim.Config{Threads: threads, LatencyScale: 0.001, PollBan: sim.PollBan{Disabled: true}})
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Close()
	b.ResetTimer()
	st := runLoad(b, srv, threads, total)
	b.StopTimer()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	b.ReportMetric(float64(ms.HeapAlloc)/(1<<20), "heap-MiB")
	b.ReportMetric(st.Utilization, "utilization")
	b.ReportMetric(float64(st.TasksKept), "tasks-kept")
}
