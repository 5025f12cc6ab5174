package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/captchaq/captchaq/internal/pgtest"
	"github.com/captchaq/captchaq/internal/testbound"
	"github.com/captchaq/captchaq/sim"
)

// TestFrontMaxInflightAcrossReplicas: one client with max_inflight 3
// sends in.php to two replicas at once from 8 goroutines, as hard as they
// answer, until 24 tasks are accepted. Each task's record spans its
// acceptance (taken after the client's room was) to its result (dated
// before it was stored, which frees the room): at no moment do more than
// 3 of those spans overlap, whichever replica took them.
func TestFrontMaxInflightAcrossReplicas(t *testing.T) {
	t.Parallel()
	const maxInflight, n, senders = 3, 24, 8
	db := pgtest.NewDatabase(t)
	f := newProcessFleet(t, "test-cli-lim-", sim.Config{Threads: 10, LatencyScale: 0.05, Seed: 11, PollBan: sim.PollBan{Disabled: true}})
	clients := writeFile(t, "clients.json", fmt.Sprintf(`[{"name":"qa","key":"%s","max_inflight":%d}]`, frontClient, maxInflight))
	f.worker("cli-lim-worker", "lim-provider-key", workerStartedRE, "--poll-interval", "20ms")
	var bases []string
	for range 2 {
		_, base, _ := f.serveWith(db, clients, nil)
		bases = append(bases, base)
	}
	ctx := testbound.Context(t)
	var accepted, refused atomic.Int64
	var wg sync.WaitGroup
	var mu sync.Mutex
	var failures []string
	for g := range senders {
		wg.Go(func() {
			retry := time.NewTicker(20 * time.Millisecond) // a refused sender's pace
			defer retry.Stop()
			for i := g; ctx.Err() == nil && accepted.Load() < n; i += senders {
				_, err := inPHP(bases[i%2], frontTask(i))
				switch {
				case err == nil:
					accepted.Add(1)
				case strings.Contains(err.Error(), "ERROR_NO_SLOT_AVAILABLE"):
					refused.Add(1)
					select {
					case <-retry.C:
					case <-ctx.Done():
					}
				default:
					mu.Lock()
					failures = append(failures, err.Error())
					mu.Unlock()
					return
				}
			}
		})
	}
	testbound.WaitGroup(t, "the senders", &wg)
	for _, msg := range failures {
		t.Error(msg)
	}
	conn, err := pgx.Connect(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	type span struct{ from, to time.Time }
	var spans []span
	open := 0
	if !testbound.Eventually(func() bool {
		spans, open = spans[:0], 0
		rows, err := conn.Query(ctx, `SELECT accepted_at, finished_at FROM tasks WHERE tenant = 'qa'`)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var s span
			var to *time.Time
			if err := rows.Scan(&s.from, &to); err != nil {
				t.Fatal(err)
			}
			if to == nil {
				open++
			} else {
				s.to = *to
			}
			spans = append(spans, s)
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		return open == 0
	}) {
		t.Fatalf("%d of %d tasks unfinished after %v", open, len(spans), testbound.Bound)
	}
	if len(spans) < n {
		t.Fatalf("%d tasks recorded, want at least %d", len(spans), n)
	}
	// The most spans open at once: starts before ends at one instant (a
	// task accepted at the instant another finished counts both).
	type edge struct {
		at    time.Time
		delta int
	}
	var edges []edge
	for _, s := range spans {
		edges = append(edges, edge{s.from, 1}, edge{s.to, -1})
	}
	slices.SortFunc(edges, func(a, b edge) int {
		if c := a.at.Compare(b.at); c != 0 {
			return c
		}
		return b.delta - a.delta
	})
	most, cur := 0, 0
	for _, e := range edges {
		cur += e.delta
		most = max(most, cur)
	}
	if most > maxInflight {
		t.Errorf("%d tasks of the client were in flight at once across the replicas, want at most %d", most, maxInflight)
	}
	if refused.Load() == 0 {
		t.Errorf("no submit was refused: the senders never met the bound")
	}
	t.Logf("%d tasks accepted, %d submits refused, at most %d in flight at once", len(spans), refused.Load(), most)
}

// TestFrontRateAcrossReplicas: clients with a rate of one task each
// 1,000 s (a burst of one) each send 8 in.php at one moment, 4 to each of
// two replicas: of each client's 8, one is accepted, whichever replica
// took it, and the others answer MAX_USER_TURN. With a bucket each
// replica, both replicas' first in.php got in before either heard of the
// other's.
func TestFrontRateAcrossReplicas(t *testing.T) {
	t.Parallel()
	const clients, each = 6, 8
	db := pgtest.NewDatabase(t)
	f := newProcessFleet(t, "test-cli-rate-", sim.Config{Threads: 10, LatencyScale: 0.05, Seed: 12, PollBan: sim.PollBan{Disabled: true}})
	var list []string
	for c := range clients {
		list = append(list, fmt.Sprintf(`{"name":"r%d","key":"rate-key-%d","rate":0.001}`, c, c))
	}
	file := writeFile(t, "clients.json", "["+strings.Join(list, ",")+"]")
	f.worker("cli-rate-worker", "rate-provider-key", workerStartedRE, "--poll-interval", "20ms")
	var bases []string
	for range 2 {
		_, base, _ := f.serveWith(db, file, nil)
		bases = append(bases, base)
	}
	for c := range clients {
		var accepted, refused atomic.Int64
		var mu sync.Mutex
		var failures []string
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range each {
			v := frontTask(c*each + i)
			v.Set("key", fmt.Sprintf("rate-key-%d", c))
			wg.Go(func() {
				<-start
				_, err := inPHP(bases[i%2], v)
				switch {
				case err == nil:
					accepted.Add(1)
				case strings.Contains(err.Error(), "MAX_USER_TURN"):
					refused.Add(1)
				default:
					mu.Lock()
					failures = append(failures, err.Error())
					mu.Unlock()
				}
			})
		}
		close(start)
		testbound.WaitGroup(t, "the senders", &wg)
		for _, msg := range failures {
			t.Error(msg)
		}
		if accepted.Load() != 1 || refused.Load() != each-1 {
			t.Errorf("client r%d: %d of %d in.php at once accepted, %d refused with MAX_USER_TURN; want 1 and %d (its rate across the replicas)", c, accepted.Load(), each, refused.Load(), each-1)
		}
	}
}

// TestFrontHealsLostFinishedNotice: a replica that stored a task's answer
// and died before announcing it (here: the answer written straight into
// the database, as that replica's commit left it) leaves the other
// replicas without the news. The client's max_inflight is the database's
// count, so its next task is accepted at once on either replica; and each
// replica's own count (/v1/stats, the fair share) lets the task go at its
// next resync once the answer is older than the announcements' settling
// time (10 s).
func TestFrontHealsLostFinishedNotice(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDatabase(t)
	// Solves that take many minutes: the task stays in flight.
	f := newProcessFleet(t, "test-cli-heal-", sim.Config{Threads: 10, LatencyScale: 100, Seed: 14, PollBan: sim.PollBan{Disabled: true}})
	clients := writeFile(t, "clients.json", fmt.Sprintf(`[{"name":"qa","key":"%s","max_inflight":1,"admin":true}]`, frontClient))
	f.worker("cli-heal-worker", "heal-provider-key", workerStartedRE, "--poll-interval", "20ms")
	var bases []string
	for range 2 {
		_, base, _ := f.serveWith(db, clients, nil, "--resync-every", "100ms")
		bases = append(bases, base)
	}
	inflight := func(base string) int {
		for _, c := range statsOf(t, base).Clients {
			if c.Name == "qa" {
				return c.Inflight
			}
		}
		return 0
	}
	first, err := inPHP(bases[0], frontTask(0))
	if err != nil {
		t.Fatal(err)
	}
	for _, base := range bases {
		testbound.Until(t, base+" counting the first task in flight", func() bool { return inflight(base) == 1 })
	}
	if _, err := inPHP(bases[1], frontTask(1)); err == nil || !strings.Contains(err.Error(), "ERROR_NO_SLOT_AVAILABLE") {
		t.Fatalf("a second task while the first is in flight: %v, want ERROR_NO_SLOT_AVAILABLE", err)
	}
	ctx := testbound.Context(t)
	conn, err := pgx.Connect(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	tag, err := conn.Exec(ctx, `UPDATE tasks SET status = 'solved', result_method = method, result_kind = 'token',
		result_token = 'lost-notice-token', result_attempts = 1, finished_at = now() - interval '1 minute',
		result_accepted_at = accepted_at WHERE id = $1 AND status = 'inflight'`, "qa/"+first)
	if err != nil || tag.RowsAffected() != 1 {
		t.Fatalf("storing the answer: %v, %d rows", err, tag.RowsAffected())
	}
	for i, base := range bases {
		if _, err := inPHP(base, frontTask(2+i)); err != nil {
			t.Errorf("%s: a task after the first was answered: %v, want it accepted", base, err)
		}
		// Answered as well, unannounced (a result comes after the room
		// its task took: the room goes with it).
		if _, err := conn.Exec(ctx, `UPDATE tasks SET status = 'failed', result_error_code = 'CANCELED', finished_at = now()
			WHERE tenant = 'qa' AND status IN ('queued', 'inflight')`); err != nil {
			t.Fatal(err)
		}
	}
	for _, base := range bases {
		testbound.Until(t, base+" letting the answered tasks go", func() bool { return inflight(base) == 0 })
	}
	if got, err := resPHP(bases[1], first); err != nil || got != "OK|lost-notice-token" {
		t.Errorf("res.php of the first task: %q, %v", got, err)
	}
}
