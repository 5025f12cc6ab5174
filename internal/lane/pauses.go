package lane

import (
	"errors"
	"sync"
	"time"

	"github.com/captchaq/captchaq/provider"
)

// Pauses is a queue's side of its lanes' pauses (each lane keeps its
// own), under a lock of its own: the Resume calls, which tell an answer
// to a request sent before the latest one (stale: it cannot pause
// again), and whether every lane is paused (the queue's OnPause was
// called for it). Safe for concurrent use. Its lock is taken before a
// lane's Health lock (Set, Resume, All), never under it.
type Pauses struct {
	lanes []*Lane

	mu      sync.Mutex
	resumes int
	all     bool
}

// NewPauses watches the pauses of lanes, the queue's every lane.
func NewPauses(lanes []*Lane) *Pauses { return &Pauses{lanes: lanes} }

// Epoch identifies the pause state a request is sent under (Set's
// sentAt).
func (p *Pauses) Epoch() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.resumes
}

// All returns the first lane and its pause when every lane is paused at
// now (lifting expired pauses), or nil.
func (p *Pauses) All(now time.Time) (*Lane, *Pause) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.allLocked(now)
}

func (p *Pauses) allLocked(now time.Time) (*Lane, *Pause) {
	var first *Lane
	var fp *Pause
	for _, l := range p.lanes {
		lp := l.Health.Paused(now)
		if lp == nil {
			p.all = false
			return nil, nil
		}
		if first == nil {
			first, fp = l, lp
		}
	}
	return first, fp
}

// PauseFor is the pause an account error err calls for at now: the
// provider's code, until at least d after now, or its RetryAfter when
// longer; with neither, until Resume (or a probe that answers).
func PauseFor(err error, d time.Duration, now time.Time) *Pause {
	var pe *provider.Error
	errors.As(err, &pe)
	p := &Pause{Err: err}
	if pe != nil {
		p.Code = pe.Code
		d = max(d, pe.RetryAfter)
	}
	if d > 0 {
		p.Until = now.Add(d)
	}
	return p
}

// Paused is what Set did with a pause.
type Paused struct {
	// Stale: the answer came to a request sent before the latest Resume;
	// nothing was paused.
	Stale bool
	// First: the lane was not paused before.
	First bool
	// All: with this pause every lane is paused, and was not before.
	All bool
	// Permanent, with All: no lane's pause lifts by itself.
	Permanent bool
}

// Set pauses l with pause at now, for an account error answered to a
// request sent under epoch sentAt (Epoch).
func (p *Pauses) Set(l *Lane, pause *Pause, sentAt int, now time.Time) Paused {
	p.mu.Lock()
	defer p.mu.Unlock()
	if sentAt != p.resumes {
		return Paused{Stale: true}
	}
	r := Paused{First: l.Health.SetPause(pause)}
	if first, _ := p.allLocked(now); first == nil || p.all {
		return r
	}
	p.all, r.All, r.Permanent = true, true, true
	for _, o := range p.lanes {
		op := o.Health.Paused(now)
		r.Permanent = r.Permanent && op != nil && op.Until.IsZero()
	}
	return r
}

// Resume lifts every lane's pause and makes the answers to requests sent
// before it stale; was is true when a lane was paused.
func (p *Pauses) Resume() (was bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, l := range p.lanes {
		was = l.Health.Resume() || was
	}
	p.all = false
	p.resumes++
	return was
}
