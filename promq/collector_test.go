package promq_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/internal/simrig"
	"github.com/captchaq/captchaq/promq"
	"github.com/captchaq/captchaq/sim"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// snapshots is a Source that answers whatever snapshot the test set last.
type snapshots struct {
	mu sync.Mutex
	m  captchaq.Metrics
}

func (s *snapshots) set(m captchaq.Metrics) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.m = m
}

func (s *snapshots) Metrics() captchaq.Metrics {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m
}

const help = `
# HELP captchaq_tasks_submitted_total Tasks taken into the queue.
# TYPE captchaq_tasks_submitted_total counter
# HELP captchaq_tasks_solved_total Tasks solved.
# TYPE captchaq_tasks_solved_total counter
# HELP captchaq_tasks_failed_total Tasks failed for good.
# TYPE captchaq_tasks_failed_total counter
# HELP captchaq_retries_total Attempts sent back to the queue, by the provider's code (or NETWORK).
# TYPE captchaq_retries_total counter
# HELP captchaq_provider_requests_total HTTP requests to the provider.
# TYPE captchaq_provider_requests_total counter
# HELP captchaq_threads_plan The plan's threads.
# TYPE captchaq_threads_plan gauge
# HELP captchaq_threads_window Threads the queue may use now: the plan's unless the provider said no free thread lately.
# TYPE captchaq_threads_window gauge
# HELP captchaq_threads_in_use Threads taken: tasks at the provider or being submitted.
# TYPE captchaq_threads_in_use gauge
# HELP captchaq_queue_depth Tasks waiting for a thread, by priority.
# TYPE captchaq_queue_depth gauge
# HELP captchaq_oldest_waiting_seconds The longest wait among tasks waiting for a thread.
# TYPE captchaq_oldest_waiting_seconds gauge
# HELP captchaq_delivery_delay_p50_seconds How long answers sat ready at the provider before delivery, median of the last 1024.
# TYPE captchaq_delivery_delay_p50_seconds gauge
# HELP captchaq_delivery_delay_p99_seconds How long answers sat ready at the provider before delivery, 99th percentile of the last 1024.
# TYPE captchaq_delivery_delay_p99_seconds gauge
# HELP captchaq_paused 1 while an account error stops all sending.
# TYPE captchaq_paused gauge
`

// Every field of the snapshot lands in its series, with its type and help;
// nothing else is exposed.
func TestCollectorExposesEverySeriesOfTheSnapshot(t *testing.T) {
	t.Parallel()
	src := &snapshots{}
	src.set(captchaq.Metrics{
		Submitted: 40, Solved: 31, Failed: 2, Retries: 7,
		RetriesByReason: map[string]int64{"ERROR_NO_SLOT_AVAILABLE": 5, "NETWORK": 2},
		Requests:        95, RequestsPerSolved: 95.0 / 31, SuccessRate: 31.0 / 33, ThroughputPerMin: 12,
		Threads: 10, Window: 8, ThreadsInUse: 6,
		QueueDepth: 4, DepthByPriority: map[int]int{1: 3, 7: 1}, OldestWaitingSeconds: 12.5,
		DeliveryDelayP50: 0.25, DeliveryDelayP99: 1.5,
		Paused: true, PausedReason: "ERROR_ZERO_BALANCE",
	})
	c := promq.NewCollector(src)
	want := help + `
captchaq_tasks_submitted_total 40
captchaq_tasks_solved_total 31
captchaq_tasks_failed_total 2
captchaq_retries_total{reason="ERROR_NO_SLOT_AVAILABLE"} 5
captchaq_retries_total{reason="NETWORK"} 2
captchaq_provider_requests_total 95
captchaq_threads_plan 10
captchaq_threads_window 8
captchaq_threads_in_use 6
captchaq_queue_depth{priority="1"} 3
captchaq_queue_depth{priority="5"} 0
captchaq_queue_depth{priority="7"} 1
captchaq_oldest_waiting_seconds 12.5
captchaq_delivery_delay_p50_seconds 0.25
captchaq_delivery_delay_p99_seconds 1.5
captchaq_paused 1
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want)); err != nil {
		t.Fatal(err)
	}

	// The queue empties and resumes: every priority seen stays, at 0.
	src.set(captchaq.Metrics{Submitted: 40, Solved: 35, Failed: 2, Threads: 10, Window: 10, DepthByPriority: map[int]int{}})
	want = help + `
captchaq_tasks_submitted_total 40
captchaq_tasks_solved_total 35
captchaq_tasks_failed_total 2
captchaq_provider_requests_total 0
captchaq_threads_plan 10
captchaq_threads_window 10
captchaq_threads_in_use 0
captchaq_queue_depth{priority="1"} 0
captchaq_queue_depth{priority="5"} 0
captchaq_queue_depth{priority="7"} 0
captchaq_oldest_waiting_seconds 0
captchaq_delivery_delay_p50_seconds 0
captchaq_delivery_delay_p99_seconds 0
captchaq_paused 0
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want)); err != nil {
		t.Fatal(err)
	}
}

// The names follow Prometheus' conventions (promlint: _total on counters,
// base units, no reserved suffixes).
func TestCollectorPassesPromlint(t *testing.T) {
	t.Parallel()
	src := &snapshots{}
	src.set(captchaq.Metrics{RetriesByReason: map[string]int64{"NETWORK": 1}, DepthByPriority: map[int]int{1: 1}})
	problems, err := testutil.CollectAndLint(promq.NewCollector(src))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("%s: %s", p.Metric, p.Text)
	}
}

// docs/operating.md lists every series, so the names users alert on are
// written down where they look.
func TestDocsListEverySeries(t *testing.T) {
	t.Parallel()
	src := &snapshots{}
	src.set(captchaq.Metrics{RetriesByReason: map[string]int64{"NETWORK": 1}})
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(promq.NewCollector(src))
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	if len(families) != 13 {
		t.Errorf("%d series, want 13", len(families))
	}
	page, err := os.ReadFile("../docs/operating.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if !strings.Contains(string(page), "`"+f.GetName()) {
			t.Errorf("docs/operating.md does not list %s", f.GetName())
		}
	}
}

// A real queue against the simulator: tasks waiting before Start show by
// priority with the oldest wait; after the batch the counters are exactly
// the tasks solved and nothing waits.
func TestCollectorReadsAQueue(t *testing.T) {
	t.Parallel()
	client := simrig.Start(t, simrig.Options{Sim: sim.Config{Threads: 5, LatencyScale: 0.001, Seed: 3},
		Key: "promq-test-key", Timeout: 10 * time.Second}).Client
	// The clock stands still while tasks are taken in and read, then runs.
	var frozen atomic.Pointer[time.Time]
	accepted := time.Now().Add(-time.Minute)
	frozen.Store(&accepted)
	q, err := captchaq.New(captchaq.Config{
		Provider: client, Threads: 5, PollInterval: 10 * time.Millisecond,
		Now: func() time.Time {
			if p := frozen.Load(); p != nil {
				return *p
			}
			return time.Now()
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var futures []*captchaq.Future
	for i, prio := range []int{1, 1, 0, 0, 0} {
		f, err := q.Submit(ctx, captchaq.Task{ID: fmt.Sprint("t", i), Method: "turnstile", Priority: prio,
			Params: map[string]string{"sitekey": "0x4AAA", "pageurl": fmt.Sprint("https://shop.example/", i)}})
		if err != nil {
			t.Fatal(err)
		}
		futures = append(futures, f)
	}
	read := accepted.Add(30 * time.Second)
	frozen.Store(&read)
	c := promq.NewCollector(q)
	names := []string{"captchaq_tasks_submitted_total", "captchaq_tasks_solved_total", "captchaq_tasks_failed_total",
		"captchaq_retries_total", "captchaq_threads_plan", "captchaq_threads_in_use", "captchaq_queue_depth",
		"captchaq_oldest_waiting_seconds", "captchaq_paused"}
	want := help + `
captchaq_tasks_submitted_total 5
captchaq_tasks_solved_total 0
captchaq_tasks_failed_total 0
captchaq_threads_plan 5
captchaq_threads_in_use 0
captchaq_queue_depth{priority="1"} 2
captchaq_queue_depth{priority="5"} 3
captchaq_oldest_waiting_seconds 30
captchaq_paused 0
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), names...); err != nil {
		t.Fatal(err)
	}

	frozen.Store(nil)
	if err := q.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer q.Shutdown(context.Background())
	for _, f := range futures {
		r, err := f.Wait(ctx)
		if err != nil || r.Status != captchaq.StatusSolved {
			t.Fatalf("task %s: %+v, %v; want solved", f.ID(), r, err)
		}
	}
	want = help + `
captchaq_tasks_submitted_total 5
captchaq_tasks_solved_total 5
captchaq_tasks_failed_total 0
captchaq_threads_plan 5
captchaq_threads_in_use 0
captchaq_queue_depth{priority="1"} 0
captchaq_queue_depth{priority="5"} 0
captchaq_oldest_waiting_seconds 0
captchaq_paused 0
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), names...); err != nil {
		t.Fatal(err)
	}
	// Every request the client made is counted: five submits and at least one poll.
	n := client.Requests()
	if n < 6 {
		t.Errorf("the client made %d requests, want at least 6", n)
	}
	want = fmt.Sprintf(`
# HELP captchaq_provider_requests_total HTTP requests to the provider.
# TYPE captchaq_provider_requests_total counter
captchaq_provider_requests_total %d
`, n)
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), "captchaq_provider_requests_total"); err != nil {
		t.Error(err)
	}
}

// A queue of several providers adds each one's series.
func TestCollectorProviders(t *testing.T) {
	t.Parallel()
	src := &snapshots{}
	src.set(captchaq.Metrics{Providers: []captchaq.ProviderMetrics{
		{Name: "main", Threads: 20, ThreadsInUse: 20, Solved: 900, Failed: 3, Healthy: true, EarlyPingbacksDropped: 7,
			Refused: []captchaq.TypeRefusal{{Method: "hcaptcha", Code: "ERROR_METHOD_CALL"}}},
		{Name: "backup", Threads: 100, ThreadsInUse: 4, Solved: 100, Moved: 2, Spend: 0.299, SpendLastHour: 0.15, CostPer1000: 2.99, Down: true},
	}})
	c := promq.NewCollector(src)
	want := `
# HELP captchaq_early_pingbacks_dropped_total Pingbacks for ids not yet checkpointed, dropped after 10 s or past 256 kept, by provider.
# TYPE captchaq_early_pingbacks_dropped_total counter
captchaq_early_pingbacks_dropped_total{provider="backup"} 0
captchaq_early_pingbacks_dropped_total{provider="main"} 7
# HELP captchaq_provider_cost_per_1000 Spend per 1,000 tokens solved by the provider.
# TYPE captchaq_provider_cost_per_1000 gauge
captchaq_provider_cost_per_1000{provider="backup"} 2.99
captchaq_provider_cost_per_1000{provider="main"} 0
# HELP captchaq_provider_healthy 1 while the provider is in routing (not down, not paused).
# TYPE captchaq_provider_healthy gauge
captchaq_provider_healthy{provider="backup"} 0
captchaq_provider_healthy{provider="main"} 1
# HELP captchaq_provider_spend_total What the provider's solves cost (delivered or abandoned), in its price's currency.
# TYPE captchaq_provider_spend_total counter
captchaq_provider_spend_total{provider="backup"} 0.299
captchaq_provider_spend_total{provider="main"} 0
# HELP captchaq_provider_tasks_moved_total Tasks in flight at a provider that could not be polled, submitted to another.
# TYPE captchaq_provider_tasks_moved_total counter
captchaq_provider_tasks_moved_total{provider="backup"} 2
captchaq_provider_tasks_moved_total{provider="main"} 0
# HELP captchaq_provider_tasks_solved_total Tasks solved, by provider.
# TYPE captchaq_provider_tasks_solved_total counter
captchaq_provider_tasks_solved_total{provider="backup"} 100
captchaq_provider_tasks_solved_total{provider="main"} 900
# HELP captchaq_provider_threads_in_use The provider's threads taken.
# TYPE captchaq_provider_threads_in_use gauge
captchaq_provider_threads_in_use{provider="backup"} 4
captchaq_provider_threads_in_use{provider="main"} 20
# HELP captchaq_provider_type_refused 1 while the provider refuses a type: its tasks go to other providers until a probe is accepted.
# TYPE captchaq_provider_type_refused gauge
captchaq_provider_type_refused{method="hcaptcha",provider="main"} 1
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), "captchaq_early_pingbacks_dropped_total",
		"captchaq_provider_cost_per_1000", "captchaq_provider_healthy", "captchaq_provider_spend_total",
		"captchaq_provider_tasks_moved_total", "captchaq_provider_tasks_solved_total", "captchaq_provider_threads_in_use",
		"captchaq_provider_type_refused"); err != nil {
		t.Fatal(err)
	}
	problems, err := testutil.CollectAndLint(c)
	if err != nil || len(problems) > 0 {
		t.Fatalf("promlint: %v %v", problems, err)
	}
}
