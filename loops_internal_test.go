package captchaq

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/captchaq/captchaq/provider"
)

// instantProvider accepts every task and answers every poll with the
// token "tok-" + captcha id.
type instantProvider struct{ n atomic.Int64 }

func (p *instantProvider) Submit(context.Context, provider.Task, string) (string, error) {
	return fmt.Sprintf("c%d", p.n.Add(1)), nil
}

func (p *instantProvider) PollMany(_ context.Context, ids []string) ([]provider.PollResult, error) {
	rs := make([]provider.PollResult, len(ids))
	for i, id := range ids {
		rs[i] = provider.PollResult{ID: id, Ready: true, Answer: provider.Answer{Raw: "tok-" + id, Token: "tok-" + id}}
	}
	return rs, nil
}

// TestLoopsStartStop stops and starts the dispatcher and the poller many
// times while tasks go through: every task is still solved once, with its
// own token, and Close leaves no goroutine behind (TestMain's goleak).
func TestLoopsStartStop(t *testing.T) {
	t.Parallel()
	q, err := New(Config{Provider: &instantProvider{}, Threads: 4, PollInterval: PollIntervalMin})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	if err := q.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	const tasks = 40
	futures := make([]*Future, tasks)
	for i := range futures {
		t := Task{ID: fmt.Sprint("t", i), Method: "turnstile", Params: map[string]string{"sitekey": "0x4AAA", "pageurl": "https://shop.example/"}}
		if futures[i], err = q.Submit(ctx, t); err != nil {
			break
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	for range 200 {
		for _, l := range q.loops {
			l.Stop()
		}
		for _, l := range q.loops {
			if err := l.Start(q.runCtx); err != nil {
				t.Fatal(err)
			}
		}
	}
	wait, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	captchaIDs := map[string]bool{}
	for i, f := range futures {
		r, err := f.Wait(wait)
		if err != nil || r.Status != StatusSolved || r.Token != "tok-"+r.CaptchaID || !strings.HasPrefix(r.CaptchaID, "c") || captchaIDs[r.CaptchaID] {
			t.Fatalf("task %d: %+v, %v: want solved once with the token of its own captcha id", i, r, err)
		}
		captchaIDs[r.CaptchaID] = true
	}
	if m := q.Metrics(); m.Solved != tasks {
		t.Errorf("Metrics.Solved = %d, want %d", m.Solved, tasks)
	}
}
