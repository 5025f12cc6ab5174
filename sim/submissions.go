package sim

import "time"

// submissionBook counts accepted submits by fingerprint for Stats.Duplicates.
// A fingerprint is forgotten window (Config.ResultTTL) after its last
// accepted submit, as long as the simulator may still hold the task that
// submit made, so the book holds the submits of the last window only.
type submissionBook struct {
	window time.Duration
	byFP   map[[16]byte]submitCount
	order  []submitAt // in accept order, oldest first
}

type submitCount struct {
	n    int
	last int64 // UnixNano of the last accepted submit
}

type submitAt struct {
	fp [16]byte
	at int64
}

func newSubmissionBook(window time.Duration) submissionBook {
	return submissionBook{window: window, byFP: make(map[[16]byte]submitCount)}
}

// add counts an accepted submit of fp at at and reports whether fp was
// submitted within the window before.
func (b *submissionBook) add(fp [16]byte, at time.Time) (duplicate bool) {
	b.forget(at)
	c := b.byFP[fp]
	c.n++
	c.last = at.UnixNano()
	b.byFP[fp] = c
	b.order = append(b.order, submitAt{fp, c.last})
	b.compact()
	return c.n > 1
}

// compact drops the order entries of submits a later one of the same
// fingerprint made stale once they outnumber the fingerprints, so that
// order stays within 2 × fingerprints + 1024 at an amortized O(1).
func (b *submissionBook) compact() {
	if len(b.order) <= 2*len(b.byFP)+1024 {
		return
	}
	kept := b.order[:0]
	for _, o := range b.order {
		if b.byFP[o.fp].last == o.at {
			kept = append(kept, o)
		}
	}
	b.order = kept
}

// count is how many submits of fp the book holds at now.
func (b *submissionBook) count(fp [16]byte, now time.Time) int {
	b.forget(now)
	return b.byFP[fp].n
}

// forget drops the fingerprints last submitted a window or longer before now.
func (b *submissionBook) forget(now time.Time) {
	cut := now.Add(-b.window).UnixNano()
	n := 0
	for _, o := range b.order {
		if o.at > cut {
			break
		}
		if c, ok := b.byFP[o.fp]; ok && c.last == o.at {
			delete(b.byFP, o.fp)
		}
		n++
	}
	b.order = b.order[n:]
}
