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

// progress reports a batch on stderr while it runs: done/total, threads
// in use, the rate of this run's answers and an ETA from the solve-time
// model (etaModel). On a terminal it keeps one line current; elsewhere (a
// pipe, a file, CI's log) it prints a line every progressEvery, with the
// attempts retried since the last one when there were any, so a long
// batch, or a provider that does not answer, is not met with silence.
//
// The line is drawn by hand: a status line is three escape codes, and the
// progress-bar libraries (schollz/progressbar, vbauerster/mpb) compute
// their ETA from the rate, which is what misleads here, and redraw with
// carriage returns off a terminal too, where a log wants whole lines.
type progress struct {
	w     io.Writer
	term  bool
	total int // -1: unknown (stdin)
	q     *captchaq.Queue
	start time.Time
	loop  *startstop.Loop // report, every tick, until finish

	mu   sync.Mutex
	done int
	eta  *etaModel
	// lastLine and lastBy: when the last line was printed off a terminal,
	// and the retries by reason then.
	lastLine time.Time
	lastBy   map[string]int64
}

// Redraw and line intervals.
const (
	progressRedraw = 250 * time.Millisecond // on a terminal
	progressSample = time.Second            // off a terminal: the model's samples
	progressEvery  = 5 * time.Second        // off a terminal: a line
)

func newProgress(w io.Writer, total int, enabled bool, q *captchaq.Queue) *progress {
	p := &progress{w: w, total: total, q: q, start: time.Now(), eta: newETAModel()}
	p.lastLine = p.start
	p.loop = startstop.New(p.run)
	if !enabled {
		return p
	}
	f, ok := w.(*os.File)
	p.term = ok && term.IsTerminal(int(f.Fd()))
	_ = p.loop.Start(context.Background())
	return p
}

func (p *progress) run(ctx context.Context) {
	every := progressSample
	if p.term {
		every = progressRedraw
	}
	startstop.Every(ctx, every, p.report)
	if p.term {
		fmt.Fprint(p.w, "\r\033[K")
	}
}

// report samples the queue, and redraws the terminal's line or prints a
// line when one is due.
func (p *progress) report(context.Context) {
	m := p.q.Metrics()
	now := time.Now()
	p.mu.Lock()
	p.eta.sample(now, m.ThreadsInUse)
	done := p.done
	eta := "-"
	if p.total >= 0 && !m.Paused {
		if d, ok := p.eta.left(m, max(p.total-done-len(p.eta.open), 0)); ok {
			eta = d.Round(time.Second).String()
		}
	}
	p.mu.Unlock()
	why := reachNote(m, now)
	if why != "" {
		eta = "-" // nothing is solved while the provider cannot be reached
	}
	elapsed := now.Sub(p.start)
	if p.term {
		line := progressLine(done, p.total, m, elapsed, eta)
		if why != "" {
			line += "  " + why
		}
		fmt.Fprint(p.w, "\r\033[K"+line)
		return
	}
	if now.Sub(p.lastLine) < progressEvery-progressSample/2 {
		return
	}
	line := logLine(done, p.total, m, elapsed, eta)
	if retried, ok := retryNote(m, p.lastBy, now.Sub(p.lastLine).Round(time.Second)); ok {
		line += "; " + retried
	}
	if why != "" {
		line += "; " + why
	}
	fmt.Fprintln(p.w, line)
	p.lastLine, p.lastBy = now, maps.Clone(m.RetriesByReason)
}

// answerRate is this run's answers per second: results the store already held
// took no work. It reads "-" until a task of this run has finished and a
// second has passed.
func answerRate(m captchaq.Metrics, elapsed time.Duration) string {
	worked := float64(m.Solved + m.Failed)
	if worked == 0 || elapsed < time.Second {
		return "-"
	}
	return fmt.Sprintf("%.1f tasks/s", worked/elapsed.Seconds())
}

// progressLine is the terminal's status line.
func progressLine(done, total int, m captchaq.Metrics, elapsed time.Duration, eta string) string {
	count := fmt.Sprintf("%d", done)
	if total >= 0 {
		count = fmt.Sprintf("%d/%d", done, total)
	}
	return fmt.Sprintf("solving %s  threads %d/%d  %s  ETA %s", count, m.ThreadsInUse, m.Threads, answerRate(m, elapsed), eta)
}

// logLine is the line off a terminal.
func logLine(done, total int, m captchaq.Metrics, elapsed time.Duration, eta string) string {
	count := fmt.Sprintf("%d", done)
	if total >= 0 {
		count = fmt.Sprintf("%d of %d", done, total)
	}
	s := fmt.Sprintf("captchaq batch: %s done, threads %d/%d, %s, ETA %s", count, m.ThreadsInUse, m.Threads, answerRate(m, elapsed), eta)
	if m.Paused {
		s += "; paused: " + m.PausedReason
	}
	return s
}

// retryNote says how many attempts were retried since before for reasons
// other than a busy plan (no free thread is the queue's normal pace, not
// trouble); ok is false when there were none.
func retryNote(m captchaq.Metrics, before map[string]int64, over time.Duration) (note string, ok bool) {
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
	return fmt.Sprintf("%d attempts retried in the last %s (%s); still trying", retried, over, strings.Join(reasons, ", ")), true
}

// resumed tells the model which tasks the queue took over at the provider
// from an earlier run, and since when they have been solving there: a
// rerun after a kill would otherwise expect their whole solve time again.
// It reads the store's unfinished tasks once, and only when the queue
// resumed some at the provider.
func (p *progress) resumed(ctx context.Context, st captchaq.Store) {
	if st == nil || p.q.Metrics().ResumedInFlight == 0 {
		return
	}
	since := map[string]time.Time{}
	err := st.Pending(ctx, func(r captchaq.Record) error {
		if r.Status == captchaq.StatusInFlight && r.CaptchaID != "" && !r.SubmittedAt.IsZero() {
			since[r.Task.ID] = r.SubmittedAt
		}
		return nil
	})
	if err != nil {
		return // the ETA counts them from now: later, not wrong
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for id, at := range since {
		p.eta.atProviderSince(id, at)
	}
}

// read notes a task read from the input, for the model.
func (p *progress) read(t captchaq.Task) {
	p.mu.Lock()
	p.eta.read(t)
	p.mu.Unlock()
}

func (p *progress) add(r captchaq.Result) {
	p.mu.Lock()
	p.done++
	p.eta.finished(r)
	p.mu.Unlock()
}

// finish stops the reports and clears the terminal's line.
func (p *progress) finish() { p.loop.Stop() }
