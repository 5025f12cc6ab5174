package captchaq

import (
	"context"
	"testing"
	"time"

	"github.com/captchaq/captchaq/provider"
)

// idleProvider is never asked: routing only reads the lanes.
type idleProvider struct{}

func (idleProvider) Submit(context.Context, provider.Task, string) (string, error) { return "", nil }
func (idleProvider) PollMany(context.Context, []string) ([]provider.PollResult, error) {
	return nil, nil
}

// A pass asks the lanes' routing (lane.Set.Route) with what the queue
// knows of a waiting task: its class from the providers' Methods, its
// route method and so its price, its kind's median solve time against its
// deadline, and SpillAfter counted from when it last joined the queue.
func TestQueueRouting(t *testing.T) {
	q, err := New(Config{Providers: []ProviderConfig{
		{Name: "main", Provider: idleProvider{}, Methods: []string{"turnstile"}},
		{Name: "backup", Provider: idleProvider{}, Methods: []string{"turnstile", "hcaptcha"},
			PricePer1000: map[string]float64{"default": 2}, SpillAfter: 5 * time.Second},
	}})
	if err != nil {
		t.Fatal(err)
	}
	backup := q.lanes.Lanes()[1]
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		method    string
		deadline  time.Duration // from t0; 0: none
		at        time.Duration // from t0
		class     uint64
		take      bool
		retryFrom time.Duration // from t0; 0: none
	}{
		{"hcaptcha", 0, 0, 0b10, true, 0},
		{"turnstile", 0, 5*time.Second - 1, 0b11, false, 5 * time.Second},
		{"turnstile", 0, 5 * time.Second, 0b11, true, 0},
		// Turnstile's median solve is 8 s: a deadline 12 s away would be
		// missed by waiting 5 s first, one 14 s away would not.
		{"turnstile", 12 * time.Second, 0, 0b11, true, 0},
		{"turnstile", 14 * time.Second, 0, 0b11, false, 5 * time.Second},
	} {
		tk := Task{ID: c.method, Method: c.method}
		if c.deadline > 0 {
			tk.Deadline = t0.Add(c.deadline)
		}
		pt := tk.ProviderTask()
		st := &taskState{rec: Record{Task: tk}, route: pt.RouteMethod(), class: q.lanes.Class(pt.RouteMethod()), waitingSince: t0}
		st.kind, _ = pt.KindFor(provider.KnownMethods)
		take, retry := q.waiting.Route(backup, st, t0.Add(c.at))
		want := time.Time{}
		if c.retryFrom > 0 {
			want = t0.Add(c.retryFrom)
		}
		if st.class != c.class || take != c.take || !retry.Equal(want) {
			t.Errorf("%s, deadline %v, at %v: class %b, take %v, retry %v; want %b, %v, %v",
				c.method, c.deadline, c.at, st.class, take, retry, c.class, c.take, want)
		}
		if price := q.waiting.Price(backup, st); price != 0.002 {
			t.Errorf("%s: price at backup %v, want 0.002", c.method, price)
		}
	}
}
