package captchaq

import (
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/captchaq/captchaq/internal/poller"
	"github.com/captchaq/captchaq/provider"
)

// A round with more ids due than one request carries (poller.Chunk) goes out
// in several chunks; each answer must be matched to the id its chunk
// asked for. Every id answers at once with a token naming it, so each is
// polled exactly once: a task matched to another chunk's id would have its
// answer dropped and be polled again.
func TestRoundOfSeveralChunksAnswersEachTask(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		const n = 2*poller.Chunk + 50
		var mu sync.Mutex
		largest, polled := 0, 0
		p := &scriptedLane{prefix: "C", poll: func(ids []string) ([]provider.PollResult, error) {
			mu.Lock()
			largest = max(largest, len(ids))
			polled += len(ids)
			mu.Unlock()
			rs := make([]provider.PollResult, len(ids))
			for i, id := range ids {
				tok := "token-of-" + id
				rs[i] = provider.PollResult{Ready: true, Answer: provider.Answer{Raw: tok, Token: tok}}
			}
			return rs, nil
		}}
		results := make(chan Result, n)
		q := startQueue(t, Config{
			Provider: p, Threads: n, PollInterval: time.Second,
			OnResult: func(r Result) { results <- r },
		})
		for i := range n {
			if _, err := q.Submit(t.Context(), turnstileTask(fmt.Sprintf("t%03d", i))); err != nil {
				t.Fatal(err)
			}
		}
		got := map[string]Result{}
		for len(got) < n {
			select {
			case r := <-results:
				got[r.ID] = r
			case <-time.After(time.Minute):
				t.Fatalf("%d of %d results after a minute of fake time", len(got), n)
			}
		}
		for id, r := range got {
			if r.Status != StatusSolved || r.Token != "token-of-"+r.CaptchaID {
				t.Errorf("%s: %s, token %q for captcha id %q", id, r.Status, r.Token, r.CaptchaID)
			}
		}
		mu.Lock()
		defer mu.Unlock()
		if largest != poller.Chunk {
			t.Errorf("largest poll asked for %d ids; want full chunks of %d (a round of several chunks)", largest, poller.Chunk)
		}
		if polled != n {
			t.Errorf("%d ids polled for %d tasks all ready at their first poll; want each once", polled, n)
		}
		if s := p.submitted(); s != n {
			t.Errorf("%d submits for %d tasks", s, n)
		}
	})
}
