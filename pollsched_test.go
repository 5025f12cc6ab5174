package captchaq

import (
	"bufio"
	"context"
	"encoding/base64"
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/captchaq/captchaq/internal/sched"
	"github.com/captchaq/captchaq/internal/testbound"
	"github.com/captchaq/captchaq/provider"
)

// modelProvider is a provider on the bubble's fake clock: threads plan
// threads, each task solved after a time drawn from its kind's range by
// its id (so goroutine order cannot change the draws), "no free thread"
// when all are busy. It measures what the simulator measures: requests,
// utilization over the first to last accepted submit, and how long
// answers sat ready.
type modelProvider struct {
	threads int
	seed    uint64
	lat     map[provider.Kind][2]time.Duration

	mu       sync.Mutex
	tasks    map[string]*modelTask
	next     int
	inUse    int
	submits  int
	polls    int
	delays   []time.Duration
	accepted []*modelTask
	drawn    []time.Duration // solve times, in accepted order
	order    []string        // pageurl or body of each task accepted, in order
}

type modelTask struct {
	accepted, ready time.Time
	fetched         bool
}

func (m *modelProvider) Submit(_ context.Context, t provider.Task, _ string) (string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := time.Now()
	m.submits++
	m.freeLocked(now)
	if m.inUse >= m.threads {
		return "", provider.ErrNoSlotAvailable
	}
	k, err := t.Kind()
	if err != nil {
		return "", err
	}
	h := fnv.New64a()
	fmt.Fprint(h, t.Params["pageurl"], t.Params["body"])
	r := rand.New(rand.NewPCG(m.seed, h.Sum64()))
	span := m.lat[k]
	d := span[0] + time.Duration(r.Float64()*float64(span[1]-span[0]))
	m.next++
	id := strconv.Itoa(m.next)
	mt := &modelTask{accepted: now, ready: now.Add(d)}
	m.tasks[id] = mt
	m.accepted = append(m.accepted, mt)
	m.drawn = append(m.drawn, d)
	m.order = append(m.order, t.Params["pageurl"]+t.Params["body"])
	m.inUse++
	return id, nil
}

// freeLocked frees the threads of tasks solved by now.
func (m *modelProvider) freeLocked(now time.Time) {
	n := 0
	for _, t := range m.tasks {
		if now.Before(t.ready) {
			n++
		}
	}
	m.inUse = n
}

func (m *modelProvider) PollMany(_ context.Context, ids []string) ([]provider.PollResult, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := time.Now()
	m.polls++
	out := make([]provider.PollResult, len(ids))
	for i, id := range ids {
		out[i].ID = id
		t := m.tasks[id]
		if t == nil || now.Before(t.ready) {
			continue
		}
		out[i].Ready, out[i].Answer = true, provider.Answer{Token: "tok-" + id, Raw: "tok-" + id}
		if !t.fetched {
			t.fetched = true
			m.delays = append(m.delays, now.Sub(t.ready))
		}
		delete(m.tasks, id)
	}
	return out, nil
}

// outcome is one run's measures, as bench reports them.
type outcome struct {
	requestsPerTask, utilization float64
	p50, p99                     time.Duration
	makespan                     time.Duration
	// floor is the makespan no client can beat: the drawn solve times
	// summed ÷ threads, or the longest one if larger.
	floor time.Duration
}

func (o outcome) frontier() float64 { return (o.requestsPerTask - 1) * (1 - o.utilization) }

func (m *modelProvider) outcome(n int, makespan time.Duration) outcome {
	m.mu.Lock()
	defer m.mu.Unlock()
	first, last := m.accepted[0].accepted, m.accepted[len(m.accepted)-1].accepted
	var busy time.Duration
	for _, t := range m.accepted {
		end := t.ready
		if end.After(last) {
			end = last
		}
		if end.After(t.accepted) {
			busy += end.Sub(t.accepted)
		}
	}
	d := slices.Clone(m.delays)
	slices.Sort(d)
	at := func(p float64) time.Duration { return d[max(int(math.Ceil(p*float64(len(d))))-1, 0)] }
	var sum time.Duration
	for _, d := range m.drawn {
		sum += d
	}
	return outcome{
		floor:           max(sum/time.Duration(m.threads), slices.Max(m.drawn)),
		requestsPerTask: float64(m.submits+m.polls) / float64(n),
		utilization:     float64(busy) / (float64(m.threads) * float64(last.Sub(first))),
		p50:             at(0.5), p99: at(0.99), makespan: makespan,
	}
}

// fastMix is the mix of issue 19: 30% images solved in 0.2–0.5 s, 40%
// Turnstile in 2–6 s, 30% reCAPTCHA v2 in 5–12 s.
var fastMix = map[provider.Kind][2]time.Duration{
	provider.KindImage:       {200 * time.Millisecond, 500 * time.Millisecond},
	provider.KindTurnstile:   {2 * time.Second, 6 * time.Second},
	provider.KindRecaptchaV2: {5 * time.Second, 12 * time.Second},
}

func fastMixTasks(n int) []Task {
	tasks := make([]Task, n)
	for i := range tasks {
		id := fmt.Sprintf("t%03d", i)
		switch i % 10 {
		case 0, 3, 6:
			tasks[i] = Task{ID: id, Method: "base64", Params: map[string]string{"body": base64.StdEncoding.EncodeToString([]byte(id))}}
		case 1, 4, 7, 9:
			tasks[i] = Task{ID: id, Method: "turnstile", Params: map[string]string{"sitekey": "0x4AAAAAAAC3DHQFLr1GavRN", "pageurl": "https://a.example/" + id}}
		default:
			tasks[i] = Task{ID: id, Method: "userrecaptcha", Params: map[string]string{"googlekey": "6Le-wvkSAAAAAPBMRTvw0Q4Muexq9bi0DJwx_mJ-", "pageurl": "https://b.example/" + id}}
		}
	}
	return tasks
}

// startModel starts a Queue with cfg on m, with m's threads; call it in
// a synctest bubble. The queue closes when t ends.
func startModel(t *testing.T, cfg Config, m *modelProvider) *Queue {
	t.Helper()
	cfg.Provider, cfg.Threads = m, m.threads
	return startQueue(t, cfg)
}

// startQueue starts a queue with cfg, closed when t ends.
func startQueue(t *testing.T, cfg Config) *Queue {
	t.Helper()
	q, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := q.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { q.Close() })
	return q
}

// runModel solves tasks through a Queue with cfg on a modelProvider with
// the solve times of lat, in a synctest bubble: the clock is fake, so
// the outcome does not depend on the machine's speed.
func runModel(t *testing.T, cfg Config, threads int, lat map[provider.Kind][2]time.Duration, tasks []Task, seed uint64) (o outcome) {
	t.Helper()
	synctest.Test(t, func(t *testing.T) {
		m := &modelProvider{threads: threads, seed: seed, lat: lat, tasks: map[string]*modelTask{}}
		q := startModel(t, cfg, m)
		start := time.Now()
		rs, err := q.SolveBatch(testbound.Context(t), tasks)
		if err != nil {
			t.Fatal(err)
		}
		makespan := time.Since(start)
		for _, r := range rs {
			if r.Status != StatusSolved {
				t.Fatalf("task %s: %+v", r.ID, r)
			}
		}
		if err := q.Close(); err != nil {
			t.Fatal(err)
		}
		o = m.outcome(len(tasks), makespan)
	})
	return o
}

// At its defaults the engine keeps the threads busier per request than a
// fixed-interval bulk poller: (requests/task − 1) × (1 − utilization)
// under 1/(2×threads), where a fixed interval sits, and under the fixed
// 500 ms interval's own product on the same run (which lands near the
// line, showing the model measures what the simulator does), on each of
// three seeds. The clock is synctest's, the solve times drawn per task
// id: the outcome does not depend on the machine's speed.
func TestDefaultPollingBeatsFixedIntervalFrontier(t *testing.T) {
	t.Parallel()
	const threads = 20
	tasks := fastMixTasks(200)
	line := 1 / (2 * float64(threads))
	for seed := uint64(1); seed <= 3; seed++ {
		def := runModel(t, Config{}, threads, fastMix, tasks, seed)
		fixed := runModel(t, Config{PollInterval: 500 * time.Millisecond}, threads, fastMix, tasks, seed)
		t.Logf("seed %d: defaults: %+v frontier %.4f", seed, def, def.frontier())
		t.Logf("seed %d: fixed 500ms: %+v frontier %.4f", seed, fixed, fixed.frontier())
		// Longest first within a burst (the queue's order) saves a fixed
		// interval some requests too, so it lands a little under the line.
		if fixed.frontier() < 0.8*line {
			t.Fatalf("seed %d: the fixed interval's frontier product %.4f is far below 1/(2×threads) = %.4f: the model is off", seed, fixed.frontier(), line)
		}
		// On this model the defaults measure 0.0198, 0.0200 and 0.0204
		// against the fixed interval's 0.0209, 0.0215 and 0.0227 (1.40 to
		// 1.43 requests a task against 1.46 to 1.49, utilization 0.951 to
		// 0.953): the bound leaves room for a little noise in goroutine
		// order, none for a drift back onto the line.
		if def.frontier() > 0.9*line || def.frontier() >= fixed.frontier() {
			t.Fatalf("seed %d: defaults: frontier product %.4f, want below 0.9 × 1/(2×threads) = %.4f and below the fixed interval's %.4f",
				seed, def.frontier(), 0.9*line, fixed.frontier())
		}
		if def.requestsPerTask > 1.46 {
			t.Fatalf("seed %d: defaults: %.3f requests a task, want at most 1.46", seed, def.requestsPerTask)
		}
		if seed == 1 && (def.utilization < 0.95 || def.p99 > 600*time.Millisecond) {
			t.Fatalf("defaults: utilization %.3f, p99 %v; want at least 0.95, at most 600ms", def.utilization, def.p99)
		}
	}
}

// A lone task on an idle queue costs a few polls, not one every PollGap:
// the scheduler waits until its answer is probably ready.
func TestDefaultPollingLoneTask(t *testing.T) {
	t.Parallel()
	tasks := fastMixTasks(3)
	// Teach the kind's distribution first: the lone task is the last one.
	synctest.Test(t, func(t *testing.T) {
		m := &modelProvider{threads: 5, seed: 2, lat: fastMix, tasks: map[string]*modelTask{}}
		q := startModel(t, Config{}, m)
		for _, task := range tasks {
			m.mu.Lock()
			polls := m.polls
			m.mu.Unlock()
			r, err := q.SolveBatch(testbound.Context(t), []Task{task})
			if err != nil || r[0].Status != StatusSolved {
				t.Fatalf("%s: %+v, %v", task.ID, r, err)
			}
			m.mu.Lock()
			polls = m.polls - polls
			m.mu.Unlock()
			t.Logf("%s (%s): %d polls, solved in %.2fs", task.ID, task.Method, polls, r[0].SolveSeconds)
			if polls > 4 {
				t.Fatalf("%s: %d polls for one answer; want at most 4", task.ID, polls)
			}
		}
	})
}

// A batch handed over at once is one burst: its tasks go by priority,
// then longest expected solve time first (FIFO among equals), and a
// burst accepted later waits behind it whatever its kinds. One thread, so
// the provider sees the queue's order exactly.
func TestQueueOrdersBurstLongestFirst(t *testing.T) {
	t.Parallel()
	image := func(id string, pri int) Task {
		return Task{ID: id, Priority: pri, Method: "base64", Params: map[string]string{"body": base64.StdEncoding.EncodeToString([]byte(id))}}
	}
	web := func(id, method string) Task {
		key := map[string]string{"turnstile": "sitekey", "userrecaptcha": "googlekey"}[method]
		return Task{ID: id, Method: method, Params: map[string]string{key: "0x4AAAAAAAC3DHQFLr1GavRN", "pageurl": "https://x.example/" + id}}
	}
	first := []Task{image("img-a", 0), web("ts-a", "turnstile"), web("rc-a", "userrecaptcha"), image("img-b", 1), web("rc-b", "userrecaptcha"), web("ts-b", "turnstile")}
	second := []Task{image("img-c", 0), web("rc-c", "userrecaptcha")}
	synctest.Test(t, func(t *testing.T) {
		m := &modelProvider{threads: 1, seed: 1, lat: fastMix, tasks: map[string]*modelTask{}}
		q := startModel(t, Config{}, m)
		var wg sync.WaitGroup
		for _, batch := range [][]Task{first, second} {
			wg.Add(len(batch))
			for i, err := range q.SubmitBatchFunc(t.Context(), batch, func(i int, r Result) {
				if r.Status != StatusSolved {
					t.Errorf("%+v", r)
				}
				wg.Done()
			}) {
				if err != nil {
					t.Fatalf("%s: %v", batch[i].ID, err)
				}
			}
			testbound.Advance(2 * sched.BurstWindow)
		}
		testbound.WaitGroup(t, "a result for every task", &wg)
		want := []string{"img-b", "rc-a", "rc-b", "ts-a", "ts-b", "img-a", "rc-c", "img-c"}
		got := make([]string, len(m.order))
		for i, o := range m.order {
			got[i] = strings.TrimPrefix(o, "https://x.example/")
			if b, err := base64.StdEncoding.DecodeString(o); err == nil {
				got[i] = string(b)
			}
		}
		if !slices.Equal(got, want) {
			t.Fatalf("submit order %v, want %v", got, want)
		}
	})
}

// readmeMix approximates the simulator's default solve times (around
// provider.MedianSolveTime) for the kinds of examples/tasks.jsonl.
var readmeMix = map[provider.Kind][2]time.Duration{
	provider.KindImage:       {400 * time.Millisecond, 1200 * time.Millisecond},
	provider.KindTurnstile:   {5 * time.Second, 12 * time.Second},
	provider.KindRecaptchaV2: {15 * time.Second, 40 * time.Second},
	provider.KindRecaptchaV3: {6 * time.Second, 13 * time.Second},
	provider.KindGeeTest:     {7 * time.Second, 15 * time.Second},
}

// A small first batch (README's first command: the 23 tasks of
// examples/tasks.jsonl on 20 threads) costs under 2 requests a task. Its
// last reCAPTCHAs outlive every answer of their kind learned so far; on
// the learned samples alone they looked certainly ready and were polled
// every PollGap to the end (2.7 to 3.9 requests a task on these seeds).
func TestDefaultPollingSmallBatch(t *testing.T) {
	t.Parallel()
	f, err := os.Open("examples/tasks.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var tasks []Task
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		task, err := ParseTask(sc.Bytes())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := task.ProviderTask().Kind(); err == nil && task.Method != "hcaptcha" {
			tasks = append(tasks, task)
		}
	}
	if len(tasks) != 23 {
		t.Fatalf("%d tasks in examples/tasks.jsonl, want 23", len(tasks))
	}
	for seed := uint64(1); seed <= 5; seed++ {
		o := runModel(t, Config{}, 20, readmeMix, tasks, seed)
		t.Logf("seed %d: %.2f requests a task, ready to fetched p99 %v", seed, o.requestsPerTask, o.p99)
		if o.requestsPerTask > 2 {
			t.Errorf("seed %d: %.2f requests a task, want at most 2", seed, o.requestsPerTask)
		}
	}
}
