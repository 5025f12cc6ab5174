package main

import (
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"

	"github.com/captchaq/captchaq"
)

// progress shows done/total, threads in use, rate and ETA on a terminal, and
// nothing elsewhere (a pipe or a file gets only the summary line).
type progress struct {
	mu   sync.Mutex
	bar  *progressbar.ProgressBar
	q    *captchaq.Queue
	stop chan struct{}
	once sync.Once
}

func newProgress(w io.Writer, total int, enabled bool, q *captchaq.Queue) *progress {
	p := &progress{q: q, stop: make(chan struct{})}
	f, ok := w.(*os.File)
	if !enabled || !ok || !term.IsTerminal(int(f.Fd())) {
		return p
	}
	p.bar = progressbar.NewOptions(total,
		progressbar.OptionSetWriter(w),
		progressbar.OptionSetDescription("solving"),
		progressbar.OptionShowCount(),
		progressbar.OptionShowIts(),
		progressbar.OptionSetItsString("tasks"),
		progressbar.OptionSetPredictTime(true),
		progressbar.OptionThrottle(100*time.Millisecond),
		progressbar.OptionClearOnFinish(),
	)
	go p.describe()
	return p
}

// describe keeps the bar's description (threads in use) current while no
// result arrives, as on a run of slow reCAPTCHAs.
func (p *progress) describe() {
	t := time.NewTicker(500 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			m := p.q.Metrics()
			p.mu.Lock()
			p.bar.Describe(fmt.Sprintf("threads %d/%d", m.ThreadsInUse, m.Threads))
			p.mu.Unlock()
		case <-p.stop:
			return
		}
	}
}

func (p *progress) add(captchaq.Result) {
	if p.bar == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.bar.Add(1)
}

func (p *progress) finish() {
	p.once.Do(func() {
		close(p.stop)
		if p.bar != nil {
			p.mu.Lock()
			p.bar.Exit()
			p.mu.Unlock()
		}
	})
}
