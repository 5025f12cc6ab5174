package sqlstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/captchaq/captchaq/internal/testbound"
)

// logLines is a slog.Handler that keeps each record as one line:
// LEVEL message key=value…, times in UTC RFC 3339.
type logLines struct {
	mu    sync.Mutex
	lines []string
}

func (h *logLines) Enabled(context.Context, slog.Level) bool { return true }
func (h *logLines) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *logLines) WithGroup(string) slog.Handler            { return h }

func (h *logLines) Handle(_ context.Context, r slog.Record) error {
	line := r.Level.String() + " " + r.Message
	r.Attrs(func(a slog.Attr) bool {
		v := a.Value.Any()
		if t, ok := v.(time.Time); ok {
			v = t.UTC().Format(time.RFC3339)
		}
		line += fmt.Sprintf(" %s=%v", a.Key, v)
		return true
	})
	h.mu.Lock()
	defer h.mu.Unlock()
	h.lines = append(h.lines, line)
	return nil
}

func (h *logLines) all() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.lines)
}

type pruneReport struct {
	n   int
	err error
}

// prunes keeps, under its lock, the cutoff of each prune and what Pruned
// was told of each.
type prunes struct {
	mu      sync.Mutex
	cutoffs []time.Time
	reports []pruneReport
}

// cutoff records a prune's cutoff and returns how many came before it.
func (p *prunes) cutoff(before time.Time) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cutoffs = append(p.cutoffs, before)
	return len(p.cutoffs) - 1
}

func (p *prunes) pruned(n int, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.reports = append(p.reports, pruneReport{n, err})
}

func (p *prunes) seen() ([]time.Time, []pruneReport) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.cutoffs), slices.Clone(p.reports)
}

// newTestPruner returns a Pruner of the store at /data/q.db, with a
// retention of an hour, that logs to logs and tells seen of each prune.
func newTestPruner(interval time.Duration, logs *logLines, seen *prunes,
	prune func(context.Context, time.Time) (int, error)) *Pruner {
	return NewPruner(PrunerConfig{
		Prune: prune, Retention: time.Hour, Interval: interval,
		Logger: slog.New(logs), Name: "test store", Store: slog.String("path", "/data/q.db"),
		Pruned: seen.pruned,
	})
}

// TestPrunerRunsAtStartAndEveryInterval: the first prune runs at Start,
// the next one Interval later, each with the cutoff Retention before
// its time; a prune that deletes tasks or fails is logged with the
// store's name, one that deletes none is not.
func TestPrunerRunsAtStartAndEveryInterval(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		results := []pruneReport{{n: 2}, {n: 0}, {err: errors.New("disk full")}}
		seen := &prunes{}
		logs := &logLines{}
		p := newTestPruner(10*time.Minute, logs, seen, func(_ context.Context, before time.Time) (int, error) {
			r := results[seen.cutoff(before)]
			return r.n, r.err
		})
		if err := p.Start(t.Context()); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if cutoffs, _ := seen.seen(); len(cutoffs) != 1 || !cutoffs[0].Equal(start.Add(-time.Hour)) {
			t.Fatalf("after Start: prunes with cutoffs %v, want one at %v", cutoffs, start.Add(-time.Hour))
		}
		testbound.Advance(10*time.Minute - time.Nanosecond) // no prune yet
		if cutoffs, _ := seen.seen(); len(cutoffs) != 1 {
			t.Fatalf("before the interval: %d prunes, want 1", len(cutoffs))
		}
		testbound.Advance(10*time.Minute + time.Nanosecond)
		p.Stop()

		cutoffs, reports := seen.seen()
		want := []time.Time{start.Add(-time.Hour), start.Add(-50 * time.Minute), start.Add(-40 * time.Minute)}
		if !slices.EqualFunc(cutoffs, want, time.Time.Equal) {
			t.Errorf("cutoffs %v, want %v", cutoffs, want)
		}
		if len(reports) != 3 || reports[0] != (pruneReport{n: 2}) || reports[1] != (pruneReport{}) ||
			reports[2].n != 0 || reports[2].err == nil || reports[2].err.Error() != "disk full" {
			t.Errorf("Pruned told %v, want 2 nil, 0 nil, 0 disk full", reports)
		}
		wantLogs := []string{
			"INFO test store: pruned final tasks path=/data/q.db count=2 finished_before=" + want[0].UTC().Format(time.RFC3339),
			"ERROR test store: prune failed path=/data/q.db err=disk full",
		}
		if got := logs.all(); !slices.Equal(got, wantLogs) {
			t.Errorf("logs:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(wantLogs, "\n"))
		}
	})
}

// TestPrunerStopInterruptsPrune: Stop ends the context of a prune under
// way and waits for it; the prune's error is no failure to log.
func TestPrunerStopInterruptsPrune(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		logs := &logLines{}
		seen := &prunes{}
		p := newTestPruner(time.Minute, logs, seen, func(ctx context.Context, _ time.Time) (int, error) {
			<-ctx.Done()
			return 0, ctx.Err()
		})
		if err := p.Start(t.Context()); err != nil {
			t.Fatal(err)
		}
		synctest.Wait() // the prune waits for its context
		p.Stop()
		if _, reports := seen.seen(); len(reports) != 1 || !errors.Is(reports[0].err, context.Canceled) {
			t.Errorf("Pruned told %v, want one 0, context.Canceled", reports)
		}
		if got := logs.all(); len(got) != 0 {
			t.Errorf("logged %q for a prune Stop interrupted, want nothing", got)
		}
	})
}
