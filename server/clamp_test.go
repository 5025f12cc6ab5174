package server_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/internal/testbound"
	"github.com/captchaq/captchaq/server"
	"github.com/captchaq/captchaq/sim"
)

// A client's priority is moved into its range and its max_attempts down to
// the server's, through the JSON API and in.php alike.
func TestClientValuesClampedToOperatorLimits(t *testing.T) {
	t.Parallel()
	b := setup(t, options{
		clients: []server.Client{{Name: "low", Key: "low-key-0001", PriorityMin: 5, PriorityMax: 8}, {Name: "ops", Key: keyAdmin, Admin: true}},
		server:  func(c *server.Config) { c.MaxAttempts = 2 },
		sim:     func(c *sim.Config) { c.UnsolvableRate = 1 },
	})
	const key = "low-key-0001"
	task := func(id, extra string) string {
		return `{"id":"` + id + `","method":"turnstile","params":{"sitekey":"0x4AAAAAAA","pageurl":"https://shop.example/` + id + `"}` + extra + `}`
	}
	var c created
	b.api(t, "POST", "/v1/tasks", key, "["+task("urgent", `,"priority":1,"max_attempts":2147483647`)+","+task("late", `,"priority":9`)+","+task("plain", "")+"]", http.StatusAccepted, &c)
	for i, want := range []int{5, 8, 5} {
		if got := c.Tasks[i].Priority; got != want {
			t.Errorf("task %s: priority %d, want %d", c.Tasks[i].ID, got, want)
		}
	}
	// Every solve fails: max_attempts 2147483647 stops at the server's 2.
	for _, id := range []string{"urgent", "plain"} {
		v := b.waitFinal(t, key, id)
		if v.Status != captchaq.StatusFailed || v.Attempts != 2 {
			t.Errorf("%s: %s after %d attempts, want failed after 2", id, v.Status, v.Attempts)
		}
	}
	// in.php: priority=0 (the default, 5) and priority=1 are moved into [5,8].
	form := turnstile()
	form.Set("priority", "1")
	id := b.inOK(t, key, form)
	var v server.TaskView
	b.api(t, "GET", "/v1/tasks/"+id, key, "", http.StatusOK, &v)
	if v.Priority != 5 {
		t.Errorf("in.php priority 1: %d, want 5", v.Priority)
	}
}

func TestClientPriorityRangeChecked(t *testing.T) {
	t.Parallel()
	_, err := server.New(server.Config{Clients: []server.Client{{Name: "x", Key: "x-key-00001", PriorityMin: 6, PriorityMax: 3}}, Backend: nil})
	if err == nil || !strings.Contains(err.Error(), `client "x": priority_min 6 and priority_max 3`) {
		t.Fatalf("New: %v", err)
	}
}

// Replaying dead letters counts against the owner's max_inflight: what does
// not fit stays a dead letter, and a replay that fits none is a 429.
func TestReplayCountsAgainstMaxInflight(t *testing.T) {
	t.Parallel()
	b := setup(t, options{
		clients: []server.Client{{Name: "capped", Key: "capped-key-01", MaxInflight: 2}, {Name: "ops", Key: keyAdmin, Admin: true}},
		server:  func(c *server.Config) { c.MaxAttempts = 1 },
		sim:     func(c *sim.Config) { c.UnsolvableRate = 1 },
	})
	const key = "capped-key-01"
	for _, id := range []string{"a", "b", "c"} {
		b.api(t, "POST", "/v1/tasks", key, apiTurnstile(id), http.StatusAccepted, nil)
		if v := b.waitFinal(t, key, id); v.Status != captchaq.StatusFailed {
			t.Fatalf("%s: %s, want failed", id, v.Status)
		}
	}
	// One slow task holds one of the two places for the whole test.
	b.api(t, "POST", "/v1/tasks", key, apiRecaptcha("held"), http.StatusAccepted, nil)
	var rep struct {
		Replayed   int      `json:"replayed"`
		IDs        []string `json:"ids"`
		Held       int      `json:"held"`
		HeldReason string   `json:"held_reason"`
	}
	b.api(t, "POST", "/v1/deadletters/replay", key, `{"all":true}`, http.StatusOK, &rep)
	if rep.Replayed != 1 || len(rep.IDs) != 1 || rep.Held != 2 || !strings.Contains(rep.HeldReason, "its max_inflight is 2") {
		t.Fatalf("replay all: %+v", rep)
	}
	var dl struct {
		Total int `json:"total"`
	}
	b.api(t, "GET", "/v1/deadletters", key, "", http.StatusOK, &dl)
	if dl.Total != 2 {
		t.Fatalf("dead letters after the replay: %d, want 2", dl.Total)
	}
	// Both places taken (the held task, the replayed one until it fails
	// again): wait for the replayed one to fail, then fill its place.
	b.waitFinal(t, key, rep.IDs[0])
	b.api(t, "POST", "/v1/tasks", key, apiRecaptcha("held2"), http.StatusAccepted, nil)
	var e apiErr
	b.api(t, "POST", "/v1/deadletters/replay", keyAdmin, `{"ids":["capped/a","capped/b","capped/c"]}`, http.StatusTooManyRequests, &e)
	if !strings.Contains(e.Error, "no dead letter replayed") || !strings.Contains(e.Error, `client "capped" has 2 unfinished tasks; its max_inflight is 2`) {
		t.Fatalf("replay over the cap: %+v", e)
	}
}

// Long polls (?wait=) are capped per client and overall: 429 with the
// limit named.
func TestAPILongPollCaps(t *testing.T) {
	t.Parallel()
	b := setup(t, options{server: func(c *server.Config) { c.MaxWaitsPerClient, c.MaxWaits = 1, 2 }})
	for _, key := range []string{keyQA, keyOther} {
		b.api(t, "POST", "/v1/tasks", key, apiRecaptcha("slow"), http.StatusAccepted, nil)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	// hold keeps one long poll of key open until the test ends (again after
	// a 429 caused by a probe that held the place for a moment).
	hold := func(key string) {
		defer wg.Done()
		for ctx.Err() == nil {
			req, _ := http.NewRequestWithContext(ctx, "GET", b.url+"/v1/tasks/slow?wait=60s", nil)
			req.Header.Set("Authorization", "Bearer "+key)
			resp, err := b.http.Do(req)
			if err != nil {
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}
	probe := func(key string) (int, string) {
		req, _ := http.NewRequest("GET", b.url+"/v1/tasks/slow?wait=1ms", nil)
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := b.http.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	refusedWith := func(key, msg string) func() bool {
		return func() bool {
			code, body := probe(key)
			return code == http.StatusTooManyRequests && strings.Contains(body, msg)
		}
	}
	wg.Add(2)
	go hold(keyQA)
	testbound.Until(t, "qa's second long poll refused", refusedWith(keyQA, "this client already has 1 open long polls (?wait=), its limit"))
	go hold(keyOther)
	testbound.Until(t, "other's second long poll refused", refusedWith(keyOther, "this client already has 1 open long polls (?wait=), its limit"))
	// Two open overall: a third client is refused by the server's cap.
	code, body := probe(keyAdmin)
	if code != http.StatusTooManyRequests || !strings.Contains(body, "the server has 2 open long polls (?wait=), its limit") {
		t.Fatalf("third client's long poll: HTTP %d %s", code, body)
	}
	// A plain GET (no wait) is not a long poll: never capped.
	var v server.TaskView
	b.api(t, "GET", "/v1/tasks/slow", keyQA, "", http.StatusOK, &v)
	if v.Status == captchaq.StatusSolved || v.Status == captchaq.StatusFailed {
		t.Fatalf("slow: %s", v.Status)
	}
}
