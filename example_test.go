package captchaq_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"sync"
	"time"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/provider"
	"github.com/captchaq/captchaq/sim"
)

// demo starts an in-process simulator that solves in milliseconds and a
// client for it; stop releases both.
func demo() (client *provider.Client, stop func()) {
	srv, base, err := sim.Start(sim.Config{LatencyScale: 0.001, Seed: 7}, "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	tr := &http.Transport{}
	client, err = provider.NewClient(provider.ClientConfig{
		BaseURL: base, Key: "demo-key",
		HTTPClient: &http.Client{Transport: tr, Timeout: 10 * time.Second},
	})
	if err != nil {
		panic(err)
	}
	return client, func() { srv.Close(); tr.CloseIdleConnections() }
}

// A batch of tasks, solved with the plan's threads; results come back in
// input order, invalid tasks as failed results.
func Example() {
	client, stop := demo()
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	q, err := captchaq.New(captchaq.Config{Provider: client, Plan: "BASIC", PollInterval: 50 * time.Millisecond})
	if err != nil {
		panic(err)
	}
	if err := q.Start(ctx); err != nil {
		panic(err)
	}
	defer q.Shutdown(ctx)

	tasks := []captchaq.Task{
		{ID: "login", Method: "turnstile", Priority: 1, Params: map[string]string{"sitekey": "0x4AAAAAAAB", "pageurl": "https://shop.example/login"}},
		{ID: "signup", Method: "userrecaptcha", Params: map[string]string{"googlekey": "6Le-wvkSAAAAAPBMRTvw0Q4Muexq9bi0DJwx_mJ-", "pageurl": "https://shop.example/signup"}},
		{ID: "broken", Method: "turnstile", Params: map[string]string{"sitekey": "0x4AAAAAAAB", "pageurl": "shop.example/no-scheme"}},
	}
	results, err := q.SolveBatch(ctx, tasks)
	if err != nil {
		panic(err)
	}
	for _, r := range results {
		fmt.Println(r.ID, r.Status, r.Kind, r.ErrorCode, r.Token != "")
	}
	m := q.Metrics()
	fmt.Println("solved", m.Solved, "threads", m.Threads)
	// Output:
	// login solved turnstile  true
	// signup solved recaptcha_v2  true
	// broken failed  INVALID_TASK false
	// solved 2 threads 5
}

// StreamFunc is the producer/consumer form: it reads items that carry
// tasks (here, a task and its input line) and calls back once per item
// with its result; a task refused at the door gets a failed result too,
// with the refusal. Parallel 1 hands the tasks to the queue in the
// input's order.
func ExampleStreamFunc() {
	client, stop := demo()
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	q, err := captchaq.New(captchaq.Config{Provider: client, Threads: 3, PollInterval: 50 * time.Millisecond})
	if err != nil {
		panic(err)
	}
	if err := q.Start(ctx); err != nil {
		panic(err)
	}
	defer q.Shutdown(ctx)

	type line struct {
		n    int
		task captchaq.Task
	}
	in := make(chan line)
	go func() {
		defer close(in)
		for i := range 3 {
			in <- line{i + 1, captchaq.Task{ID: fmt.Sprint("task-", i), Method: "turnstile", Params: map[string]string{
				"sitekey": "0x4AAAAAAAB", "pageurl": fmt.Sprint("https://shop.example/", i)}}}
		}
		in <- line{4, captchaq.Task{ID: "task-3", Method: "turnstile"}} // no sitekey
	}()
	var outcomes []string
	err = captchaq.StreamFunc(ctx, q, in, 1, func(l line) (captchaq.Task, error) { return l.task, nil }, func(l line, r captchaq.Result, refused error) {
		outcomes = append(outcomes, fmt.Sprintf("line %d: %s %s", l.n, r.Status, r.ErrorCode))
	})
	sort.Strings(outcomes)
	fmt.Println(err, outcomes)
	// Output: <nil> [line 1: solved  line 2: solved  line 3: solved  line 4: failed INVALID_TASK]
}

// SubmitBatchFunc hands many tasks over in one call, stored together; each
// accepted task's result comes to the callback, with its index.
func ExampleQueue_SubmitBatchFunc() {
	client, stop := demo()
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	q, err := captchaq.New(captchaq.Config{Provider: client, Threads: 3, PollInterval: 50 * time.Millisecond})
	if err != nil {
		panic(err)
	}
	if err := q.Start(ctx); err != nil {
		panic(err)
	}
	defer q.Shutdown(ctx)

	tasks := []captchaq.Task{
		{ID: "a", Method: "turnstile", Params: map[string]string{"sitekey": "0x4AAAAAAAB", "pageurl": "https://shop.example/a"}},
		{ID: "b", Method: "turnstile", Params: map[string]string{"sitekey": "0x4AAAAAAAB"}},
		{ID: "c", Method: "turnstile", Params: map[string]string{"sitekey": "0x4AAAAAAAB", "pageurl": "https://shop.example/c"}},
	}
	var wg sync.WaitGroup
	statuses := make([]captchaq.Status, len(tasks))
	wg.Add(len(tasks))
	errs := q.SubmitBatchFunc(ctx, tasks, func(i int, r captchaq.Result) {
		statuses[i] = r.Status
		wg.Done()
	})
	for i, err := range errs {
		if err != nil {
			fmt.Println(tasks[i].ID, "refused:", errors.Is(err, captchaq.ErrInvalidTask))
			wg.Done()
		}
	}
	wg.Wait()
	fmt.Println(statuses)
	// Output:
	// b refused: true
	// [solved  solved]
}

func ExampleParseTask() {
	t, err := captchaq.ParseTask([]byte(`{"id":"a","method":"userrecaptcha","params":{"googlekey":"k","pageurl":"https://x.example","invisible":true},"ttl":"90s"}`))
	fmt.Println(t.ID, t.Params["invisible"], t.TTL, err)
	_, err = captchaq.ParseTask([]byte(`{"id":"b","methd":"turnstile"}`))
	fmt.Println(err)
	// Output:
	// a 1 1m30s <nil>
	// task: unknown field "methd" (known fields: id, method, params, priority, tenant, deadline, ttl, max_attempts, proxy, proxytype, pingback)
}

func ExampleLongestFirst() {
	tasks := []captchaq.Task{
		{ID: "logo", Method: "base64", Params: map[string]string{"body": "aGVsbG8="}},
		{ID: "login", Method: "turnstile", Params: map[string]string{"sitekey": "0x4AAAAAAAB", "pageurl": "https://shop.example/login"}},
		{ID: "signup", Method: "userrecaptcha", Params: map[string]string{"googlekey": "6Le-wvkSAAAAAPBMRTvw0Q4Muexq9bi0DJwx_mJ-", "pageurl": "https://shop.example/signup"}},
	}
	captchaq.LongestFirst(tasks)
	for _, t := range tasks {
		fmt.Println(t.ID, t.ExpectedSolveTime())
	}
	// Output:
	// signup 25s
	// login 8s
	// logo 700ms
}
