package main

import (
	"context"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/term"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/internal/startstop"
	"github.com/captchaq/captchaq/provider"
)

// progress reports a batch on stderr while it runs. On a terminal it keeps
// one line current: done/total, threads in use, rate and ETA. Elsewhere (a
// pipe, a file) it stays quiet while all goes well, and prints a notice when
// attempts are being retried, so a provider that does not answer is not
// met with silence.
type progress struct {
	w     io.Writer
	term  bool
	total int // -1: unknown (stdin)
	q     *captchaq.Queue
	start time.Time
	every time.Duration
	mu    sync.Mutex
	done  int
	loop  *startstop.Loop // report, every period, until finish
	// lastBy is the retries by reason at the last notice (off a terminal).
	lastBy map[string]int64
}

// Redraw and notice intervals.
const (
	progressRedraw = 250 * time.Millisecond
	retryNotice    = 3 * time.Second
)

func newProgress(w io.Writer, total int, enabled bool, q *captchaq.Queue) *progress {
	p := &progress{w: w, total: total, q: q, start: time.Now()}
	p.loop = startstop.New(p.run)
	if !enabled {
		return p
	}
	f, ok := w.(*os.File)
	p.term = ok && term.IsTerminal(int(f.Fd()))
	p.every = retryNotice
	if p.term {
		p.every = progressRedraw
	}
	_ = p.loop.Start(context.Background())
	return p
}

func (p *progress) run(ctx context.Context) {
	startstop.Tick(ctx, p.every, p.report)
	if p.term {
		fmt.Fprint(p.w, "\r\033[K")
	}
}

// report redraws the terminal's line, or prints a notice of retries.
func (p *progress) report(context.Context) {
	m := p.q.Metrics()
	p.mu.Lock()
	done := p.done
	p.mu.Unlock()
	if p.term {
		fmt.Fprint(p.w, "\r\033[K"+progressLine(done, p.total, m, time.Since(p.start)))
		return
	}
	if line, ok := retryLine(done, p.total, m, p.lastBy, p.every); ok {
		fmt.Fprintln(p.w, line)
	}
	p.lastBy = maps.Clone(m.RetriesByReason)
}

// progressLine is the terminal's status line. The rate counts only tasks
// finished by this run (results the store already held took no work) and
// shows once a second has passed; until then, and while no task has
// finished, rate and ETA read "-". The ETA is at least a second while tasks
// remain.
func progressLine(done, total int, m captchaq.Metrics, elapsed time.Duration) string {
	count := fmt.Sprintf("%d", done)
	if total >= 0 {
		count = fmt.Sprintf("%d/%d", done, total)
	}
	rate, eta := "-", "-"
	worked := float64(m.Solved + m.Failed)
	if worked > 0 && elapsed >= time.Second {
		r := worked / elapsed.Seconds()
		rate = fmt.Sprintf("%.1f tasks/s", r)
		if total >= 0 {
			left := time.Duration(float64(total-done) / r * float64(time.Second))
			if total > done && left < time.Second {
				left = time.Second
			}
			eta = left.Round(time.Second).String()
		}
	}
	return fmt.Sprintf("solving %s  threads %d/%d  %s  ETA %s", count, m.ThreadsInUse, m.Threads, rate, eta)
}

// retryLine is the notice, off a terminal, that attempts were retried in
// the last interval for reasons other than a busy plan (no free thread is
// the queue's normal pace, not trouble); ok is false when there were none.
func retryLine(done, total int, m captchaq.Metrics, before map[string]int64, every time.Duration) (line string, ok bool) {
	var reasons []string
	var retried int64
	for _, r := range slices.Sorted(maps.Keys(m.RetriesByReason)) {
		if r == provider.ErrNoSlotAvailable.Code {
			continue
		}
		if n := m.RetriesByReason[r] - before[r]; n > 0 {
			reasons = append(reasons, fmt.Sprintf("%s %d", r, n))
			retried += n
		}
	}
	if retried == 0 {
		return "", false
	}
	count := fmt.Sprintf("%d", done)
	if total >= 0 {
		count = fmt.Sprintf("%d of %d", done, total)
	}
	return fmt.Sprintf("captchaq batch: %s done; %d attempts retried in the last %s (%s); still trying",
		count, retried, every, strings.Join(reasons, ", ")), true
}

func (p *progress) add(captchaq.Result) {
	p.mu.Lock()
	p.done++
	p.mu.Unlock()
}

// finish stops the reports and clears the terminal's line.
func (p *progress) finish() { p.loop.Stop() }
