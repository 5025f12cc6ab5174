package captchaq_test

import (
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/internal/testbound"
	"github.com/captchaq/captchaq/provider"
	"github.com/captchaq/captchaq/sim"
)

// Tasks submitted at scattered times are polled on one cadence: no id is
// polled twice within PollInterval (the simulator bans an IP that does),
// and one bulk request per interval covers them all instead of one per
// task phase.
//
// The clock is synctest's and the simulator is served in process: the
// submits' spacing and the poll rounds are exact, whatever the machine.
func TestPollCadence(t *testing.T) {
	t.Parallel()
	const (
		every = 100 * time.Millisecond
		tasks = 12
	)
	synctest.Test(t, func(t *testing.T) {
		srv, err := sim.New(sim.Config{
			Threads: tasks, Latency: fastLatency(time.Second), Seed: 3,
			PollBan: sim.PollBan{Max: 1, Window: every * 9 / 10, Duration: time.Hour},
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { srv.Close() })
		client, err := provider.NewClient(provider.ClientConfig{BaseURL: sim.InProcessBaseURL, Key: "k", HTTPClient: srv.InProcessClient()})
		if err != nil {
			t.Fatal(err)
		}
		q, err := captchaq.New(captchaq.Config{Provider: client, Threads: tasks, PollInterval: every})
		if err != nil {
			t.Fatal(err)
		}
		if err := q.Start(t.Context()); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { q.Close() })
		start := time.Now()
		futures := make([]*captchaq.Future, tasks)
		for i := range futures {
			f, err := q.Submit(t.Context(), captchaq.Task{ID: fmt.Sprint("t", i), Method: "turnstile",
				Params: map[string]string{"sitekey": "0x4AAAAAAAC3DHQFLr1GavRN", "pageurl": fmt.Sprint("https://a.example/", i)}})
			if err != nil {
				t.Fatal(err)
			}
			futures[i] = f
			// Scatter the submits across the interval so each task starts in
			// its own phase.
			testbound.Advance(every / 7)
		}
		for i, f := range futures {
			r, err := f.Wait(testbound.Context(t))
			if err != nil || r.Status != captchaq.StatusSolved {
				t.Fatalf("task %d: %+v, %v", i, r, err)
			}
		}
		elapsed := time.Since(start)
		st := srv.Stats()
		if st.Bans != 0 {
			t.Fatalf("an id was polled twice within PollInterval: %d bans", st.Bans)
		}
		// One round per interval, plus a few for the tasks accepted before
		// the first round set the cadence.
		if limit := int64(elapsed/every) + 4; st.Calls.PollBulk > limit {
			t.Fatalf("%d poll requests in %v: want at most %d (one per PollInterval)", st.Calls.PollBulk, elapsed, limit)
		}
	})
}

// Start says which cadence polls follow: the default scheduler unless
// PollInterval is given, and the slow fallback behind pingbacks.
func TestStartLogsPollingCadence(t *testing.T) {
	t.Parallel()
	client, err := provider.NewClient(provider.ClientConfig{BaseURL: "http://127.0.0.1:1", Key: "k"})
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		cfg  captchaq.Config
		want string
	}{
		{"default", captchaq.Config{}, "level=INFO msg=polling schedule=default poll_gap=500ms\n"},
		{"poll gap", captchaq.Config{PollGap: 2 * time.Second}, "level=INFO msg=polling schedule=default poll_gap=2s\n"},
		{"fixed", captchaq.Config{PollInterval: 250 * time.Millisecond}, "level=INFO msg=polling schedule=fixed poll_interval=250ms\n"},
		{"pingback", captchaq.Config{PingbackURL: "https://cb.example/pingback/s"}, "level=INFO msg=polling schedule=pingback fallback_every=10s\n"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var logs strings.Builder
			c.cfg.Provider = client
			c.cfg.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{
				ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
					if a.Key == slog.TimeKey {
						return slog.Attr{}
					}
					return a
				}}))
			q, err := captchaq.New(c.cfg)
			if err != nil {
				t.Fatal(err)
			}
			if err := q.Start(t.Context()); err != nil {
				t.Fatal(err)
			}
			q.Close()
			if got := logs.String(); got != c.want {
				t.Errorf("logs %q, want %q", got, c.want)
			}
		})
	}
}
