package poller_test

import (
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/provider"
	"github.com/captchaq/captchaq/sim"
)

// What a token's bindings cost in poll requests, at the queue's defaults
// against the simulator's solve times (scale 1), 200 tasks of one kind
// on 200 threads, submitted at once or one per 200 ms or 1 s, the
// provider answering a user agent beside a Turnstile as 2captcha does,
// and a reCAPTCHA v2's cookies beside its token (each is given some):
// ids= and a poll of each ready id alone take fewer requests a task than
// one id a request, and every token has its bindings either way.
//
// The clock is synctest's: the counts do not depend on the machine.
func TestBindingsCostLessByIDsThanOneIDARequest(t *testing.T) {
	const n = 200
	for _, method := range []string{"turnstile", "userrecaptcha"} {
		for _, gap := range []time.Duration{0, 200 * time.Millisecond, time.Second} {
			var perTask [2]float64
			for i, mode := range []provider.BulkMode{provider.BulkAuto, provider.BulkOff} {
				var bound int
				perTask[i], bound = pollsPerTask(t, method, mode, gap, n)
				if bound != n {
					t.Errorf("%s, one per %v, bulk %v: %d tokens with bindings, want %d", method, gap, mode, bound, n)
				}
			}
			t.Logf("%s, one per %v: %.2f poll requests a task by ids=, %.2f one id a request", method, gap, perTask[0], perTask[1])
			if perTask[0] >= perTask[1] {
				t.Errorf("%s, one per %v: %.2f poll requests a task by ids=, not fewer than %.2f one id a request", method, gap, perTask[0], perTask[1])
			}
		}
	}
}

// pollsPerTask solves n tasks of method submitted gap apart, polled in
// mode, and returns the poll requests a task and how many tokens came
// with bindings.
func pollsPerTask(t *testing.T, method string, mode provider.BulkMode, gap time.Duration, n int) (float64, int) {
	var perTask float64
	var bound int
	synctest.Test(t, func(t *testing.T) {
		srv, err := sim.New(sim.Config{Seed: 3, Threads: n, UserAgent: "Mozilla/5.0 (X11; Linux x86_64) SolvedBy/8", PollBan: sim.PollBan{Disabled: true}})
		if err != nil {
			t.Fatal(err)
		}
		defer srv.Close()
		client, err := provider.NewClient(provider.ClientConfig{BaseURL: sim.InProcessBaseURL, Key: "k", HTTPClient: srv.InProcessClient(), BulkPoll: mode, Methods: provider.CommonMethods})
		if err != nil {
			t.Fatal(err)
		}
		q, err := captchaq.New(captchaq.Config{Provider: client, Threads: n})
		if err != nil {
			t.Fatal(err)
		}
		defer q.Close()
		if err := q.Start(t.Context()); err != nil {
			t.Fatal(err)
		}
		params := map[string]string{"sitekey": "0x4AAAAAAAB", "googlekey": "6Le-wvkSAAAAAPBMRTvw0Q4Muexq9bi0DJwx_mJ-", "pageurl": "https://shop.example/"}
		if method == "userrecaptcha" {
			params["cookies"] = "sid=4f2a"
		}
		var fs []*captchaq.Future
		for i := range n {
			f, err := q.Submit(t.Context(), captchaq.Task{ID: fmt.Sprint(i), Method: method, Params: params})
			if err != nil {
				t.Fatal(err)
			}
			fs = append(fs, f)
			time.Sleep(gap) // the next task's arrival, on synctest's clock
		}
		for i, f := range fs {
			r, err := f.Wait(t.Context())
			if err != nil || r.Status != captchaq.StatusSolved {
				t.Fatalf("task %d: %s, %v", i, r.Status, err)
			}
			if !provider.BindingsOf(r.Answer).Empty() {
				bound++
			}
		}
		st := srv.Stats()
		perTask = float64(st.Calls.PollBulk+st.Calls.PollSingle) / float64(n)
	})
	return perTask, bound
}
