package captchaq

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"
)

// MaxFinishedDefault is MemoryStoreConfig.MaxFinished's default.
const MaxFinishedDefault = 10000

// MemoryStoreConfig configures NewMemoryStore.
type MemoryStoreConfig struct {
	// MaxFinished bounds the final tasks (results and dead letters) kept:
	// past it, the oldest-finished are dropped, so memory stays bounded on
	// runs of any length. Queued and in-flight tasks are never dropped.
	// A dropped task's id is forgotten: submitting it again creates a new
	// task. Default MaxFinishedDefault; negative keeps none.
	MaxFinished int
}

// MemoryStore is a Store in memory: for tests and one-shot runs. Nothing
// survives the process.
type MemoryStore struct {
	mu       sync.Mutex
	closed   bool
	max      int
	seq      int64
	recs     map[string]*memRecord
	finished []finishedRef // in finish order; stale entries skipped
	nFinal   int
	// tokens are the reservoirs' stocks by name, then by result ID
	// (ReservoirStore).
	tokens map[string]map[string]Result
}

type memRecord struct {
	rec    Record
	finGen int64 // which finish of this record finished[] refers to
	// pingbackOwed is when its pingback became owed (zero: none owed),
	// pingbackLease until when a sender holds it (PingbackLedger).
	pingbackOwed, pingbackLease time.Time
}

type finishedRef struct {
	id  string
	gen int64
}

var (
	_ Store          = (*MemoryStore)(nil)
	_ PingbackLedger = (*MemoryStore)(nil)
	_ ReservoirStore = (*MemoryStore)(nil)
)

// NewMemoryStore returns an empty MemoryStore.
// Every MemoryStoreConfig is valid: it has only defaults.
func NewMemoryStore(cfg MemoryStoreConfig) *MemoryStore {
	cfg = cfg.withDefaults()
	return &MemoryStore{max: cfg.MaxFinished, recs: map[string]*memRecord{}, tokens: map[string]map[string]Result{}}
}

// withDefaults returns c with its zero fields filled in (and a negative
// MaxFinished made 0: keep none).
func (c MemoryStoreConfig) withDefaults() MemoryStoreConfig {
	switch {
	case c.MaxFinished == 0:
		c.MaxFinished = MaxFinishedDefault
	case c.MaxFinished < 0:
		c.MaxFinished = 0
	}
	return c
}

func copyRecord(r Record) Record {
	r.Task.Params = maps.Clone(r.Task.Params)
	if r.Result != nil {
		res := *r.Result
		res.Answer = slices.Clone(res.Answer)
		r.Result = &res
	}
	return r
}

// Enqueue implements Store.
func (s *MemoryStore) Enqueue(ctx context.Context, tasks []Task, now time.Time) ([]Record, []bool, error) {
	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, nil, ErrStoreClosed
	}
	for i, t := range tasks {
		if t.ID == "" {
			return nil, nil, fmt.Errorf("captchaq: enqueue: task %d: id: required", i)
		}
	}
	recs := make([]Record, len(tasks))
	existed := make([]bool, len(tasks))
	for i, t := range tasks {
		if mr, ok := s.recs[t.ID]; ok {
			recs[i], existed[i] = copyRecord(mr.rec), true
			continue
		}
		s.seq++
		mr := &memRecord{rec: Record{Task: t, Status: StatusQueued, Seq: s.seq, Fingerprint: t.Fingerprint(), AcceptedAt: now}}
		mr.rec = copyRecord(mr.rec)
		s.recs[t.ID] = mr
		recs[i] = copyRecord(mr.rec)
	}
	return recs, existed, nil
}

// Renew implements Store.
func (s *MemoryStore) Renew(ctx context.Context, t Task, now time.Time) (Record, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	mr, err := s.open(t.ID)
	if err != nil {
		return Record{}, err
	}
	if mr.rec.Status != StatusSolved {
		return Record{}, fmt.Errorf("captchaq: renew %q: task is %s, not solved", t.ID, mr.rec.Status)
	}
	mr.rec = Record{Task: copyRecord(Record{Task: t}).Task, Status: StatusQueued, Seq: mr.rec.Seq,
		Fingerprint: t.Fingerprint(), AcceptedAt: now}
	mr.finGen++ // its place in the finished order no longer applies
	s.nFinal--
	return copyRecord(mr.rec), nil
}

func (s *MemoryStore) open(id string) (*memRecord, error) {
	if s.closed {
		return nil, ErrStoreClosed
	}
	mr, ok := s.recs[id]
	if !ok {
		return nil, fmt.Errorf("%w: %q", ErrNotFound, id)
	}
	return mr, nil
}

// Checkpoint implements Store.
func (s *MemoryStore) Checkpoint(ctx context.Context, id, captchaID string, attempt int, at time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	mr, err := s.open(id)
	if err != nil {
		return err
	}
	if mr.rec.Status.Final() {
		return fmt.Errorf("captchaq: checkpoint %q: task is already %s", id, mr.rec.Status)
	}
	mr.rec.Status = StatusInFlight
	mr.rec.CaptchaID = captchaID
	mr.rec.Attempts = attempt
	mr.rec.SubmittedAt = at
	mr.rec.NotBefore = time.Time{}
	return nil
}

// Retry implements Store.
func (s *MemoryStore) Retry(ctx context.Context, id string, attempts int, notBefore time.Time, errText, errCode string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	mr, err := s.open(id)
	if err != nil {
		return err
	}
	if mr.rec.Status.Final() {
		return fmt.Errorf("captchaq: retry %q: task is already %s", id, mr.rec.Status)
	}
	mr.rec.Status = StatusQueued
	mr.rec.CaptchaID = ""
	mr.rec.Attempts = attempts
	mr.rec.NotBefore = notBefore
	mr.rec.LastError, mr.rec.LastErrorCode = errText, errCode
	return nil
}

// Finish implements Store.
func (s *MemoryStore) Finish(ctx context.Context, r Result) error {
	if !r.Status.Final() {
		return fmt.Errorf("captchaq: finish %q: status %q is not final", r.ID, r.Status)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	mr, err := s.open(r.ID)
	if err != nil {
		return err
	}
	if !mr.rec.Status.Final() {
		s.nFinal++
	}
	mr.rec.Status = r.Status
	mr.rec.CaptchaID = ""
	mr.rec.Attempts = r.Attempts
	if r.Status == StatusFailed {
		mr.rec.LastError, mr.rec.LastErrorCode = r.Error, r.ErrorCode
	}
	res := r
	res.Answer = slices.Clone(r.Answer)
	mr.rec.Result = &res
	mr.pingbackOwed, mr.pingbackLease = time.Time{}, time.Time{}
	if mr.rec.Task.Pingback != "" {
		mr.pingbackOwed = time.Now()
	}
	mr.finGen++
	s.finished = append(s.finished, finishedRef{r.ID, mr.finGen})
	s.trim()
	return nil
}

// trim drops the oldest-finished records past the bound.
func (s *MemoryStore) trim() {
	for s.nFinal > s.max && len(s.finished) > 0 {
		ref := s.finished[0]
		s.finished = s.finished[1:]
		if mr, ok := s.recs[ref.id]; ok && mr.finGen == ref.gen && mr.rec.Status.Final() {
			delete(s.recs, ref.id)
			s.nFinal--
		}
	}
	if len(s.finished) > 2*s.nFinal+1024 {
		kept := make([]finishedRef, 0, s.nFinal)
		for _, ref := range s.finished {
			if mr, ok := s.recs[ref.id]; ok && mr.finGen == ref.gen && mr.rec.Status.Final() {
				kept = append(kept, ref)
			}
		}
		s.finished = kept
	}
}

// snapshot copies the records that match keep, in Seq order.
func (s *MemoryStore) snapshot(keep func(*Record) bool) ([]Record, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, ErrStoreClosed
	}
	var out []Record
	for _, mr := range s.recs {
		if keep(&mr.rec) {
			out = append(out, copyRecord(mr.rec))
		}
	}
	slices.SortFunc(out, func(a, b Record) int { return cmp.Compare(a.Seq, b.Seq) })
	return out, nil
}

// Pending implements Store. fn runs without the store's lock held, so it
// may call the store.
func (s *MemoryStore) Pending(ctx context.Context, fn func(Record) error) error {
	return s.each(ctx, func(r *Record) bool { return !r.Status.Final() }, fn)
}

// each calls fn, without the store's lock held, for a snapshot of the
// records that keep selects, in Seq order, stopping at ctx's end.
func (s *MemoryStore) each(ctx context.Context, keep func(*Record) bool, fn func(Record) error) error {
	recs, err := s.snapshot(keep)
	if err != nil {
		return err
	}
	for _, r := range recs {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := fn(r); err != nil {
			return err
		}
	}
	return nil
}

// Get implements Store.
func (s *MemoryStore) Get(ctx context.Context, id string) (Record, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	mr, err := s.open(id)
	if err != nil {
		return Record{}, err
	}
	return copyRecord(mr.rec), nil
}

// Results implements Store.
func (s *MemoryStore) Results(ctx context.Context, fn func(Result) error) error {
	return s.each(ctx, func(r *Record) bool { return r.Status.Final() && r.Result != nil },
		func(r Record) error { return fn(*r.Result) })
}

// matchDeadLetter reports whether f selects r.
func matchDeadLetter(f DeadLetterFilter, r *Record) bool {
	if r.Status != StatusFailed {
		return false
	}
	if f.Tenant != "" && r.Task.Tenant != f.Tenant {
		return false
	}
	if f.All {
		return true
	}
	if len(f.IDs) == 0 && f.ErrorCode == "" {
		return false
	}
	// IDs and ErrorCode, when both set, must both match.
	if len(f.IDs) > 0 && !slices.Contains(f.IDs, r.Task.ID) {
		return false
	}
	return f.ErrorCode == "" || (r.Result != nil && r.Result.ErrorCode == f.ErrorCode)
}

// DeadLetters implements Store.
func (s *MemoryStore) DeadLetters(ctx context.Context, f DeadLetterFilter, fn func(Record) error) error {
	return s.each(ctx, func(r *Record) bool { return matchDeadLetter(f, r) }, fn)
}

// Replay implements Store. A replayed task keeps its Seq and last error;
// its AcceptedAt becomes now.
func (s *MemoryStore) Replay(ctx context.Context, f DeadLetterFilter, now time.Time) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return 0, ErrStoreClosed
	}
	n := 0
	for _, mr := range s.recs {
		if !matchDeadLetter(f, &mr.rec) {
			continue
		}
		mr.rec.Status = StatusQueued
		mr.rec.Attempts = 0
		mr.rec.Result = nil
		mr.rec.CaptchaID = ""
		mr.rec.NotBefore = time.Time{}
		mr.rec.SubmittedAt = time.Time{}
		mr.rec.AcceptedAt = now
		mr.finGen++ // its place in the finished order no longer applies
		s.nFinal--
		n++
	}
	return n, nil
}

// Report implements Store.
func (s *MemoryStore) Report(ctx context.Context, id string, good bool, at time.Time) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	mr, err := s.open(id)
	if err != nil {
		return false, err
	}
	if mr.rec.Status != StatusSolved {
		return false, fmt.Errorf("captchaq: report %q: task is %s: %w", id, mr.rec.Status, ErrNotSolved)
	}
	if mr.rec.Report != "" {
		return false, nil
	}
	mr.rec.Report, mr.rec.ReportedAt = ReportBad, at
	if good {
		mr.rec.Report = ReportGood
	}
	return true, nil
}

// Prune implements Store.
func (s *MemoryStore) Prune(ctx context.Context, finishedBefore time.Time) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return 0, ErrStoreClosed
	}
	n := 0
	for id, mr := range s.recs {
		if mr.rec.Status.Final() && mr.rec.Result != nil && mr.rec.Result.FinishedAt.Before(finishedBefore) {
			delete(s.recs, id)
			s.nFinal--
			n++
		}
	}
	return n, nil
}

// TakePingback implements PingbackLedger.
func (s *MemoryStore) TakePingback(ctx context.Context, id string, lease time.Duration) (Record, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return Record{}, false, ErrStoreClosed
	}
	mr, ok := s.recs[id]
	now := time.Now()
	if !ok || !mr.pingbackFree(now) {
		return Record{}, false, nil
	}
	mr.pingbackLease = now.Add(lease)
	return copyRecord(mr.rec), true, nil
}

// pingbackFree reports whether the record owes a pingback no lease holds.
func (mr *memRecord) pingbackFree(now time.Time) bool {
	return mr.rec.Status.Final() && !mr.pingbackOwed.IsZero() && !mr.pingbackLease.After(now)
}

// ClaimPingbacks implements PingbackLedger.
func (s *MemoryStore) ClaimPingbacks(ctx context.Context, grace, lease time.Duration, max int) ([]Record, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, ErrStoreClosed
	}
	now := time.Now()
	var owed []*memRecord
	for _, mr := range s.recs {
		if mr.pingbackFree(now) && !mr.pingbackOwed.After(now.Add(-grace)) {
			owed = append(owed, mr)
		}
	}
	slices.SortFunc(owed, func(a, b *memRecord) int { return a.pingbackOwed.Compare(b.pingbackOwed) })
	var recs []Record
	for _, mr := range owed[:min(max, len(owed))] {
		mr.pingbackLease = now.Add(lease)
		recs = append(recs, copyRecord(mr.rec))
	}
	return recs, nil
}

// PingbackDone implements PingbackLedger.
func (s *MemoryStore) PingbackDone(ctx context.Context, id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrStoreClosed
	}
	if mr, ok := s.recs[id]; ok {
		mr.pingbackOwed, mr.pingbackLease = time.Time{}, time.Time{}
	}
	return nil
}

// StockToken implements ReservoirStore.
func (s *MemoryStore) StockToken(ctx context.Context, name string, r Result) error {
	if err := r.CheckStockable(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrStoreClosed
	}
	stock := s.tokens[name]
	if stock == nil {
		stock = map[string]Result{}
		s.tokens[name] = stock
	}
	if _, ok := stock[r.ID]; !ok {
		r.Answer = slices.Clone(r.Answer)
		stock[r.ID] = r
	}
	return nil
}

// TakeToken implements ReservoirStore.
func (s *MemoryStore) TakeToken(ctx context.Context, name string, notBefore time.Time) (Result, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return Result{}, false, ErrStoreClosed
	}
	var best Result
	found := false
	for _, r := range s.tokens[name] {
		if r.ExpiresAt.Before(notBefore) {
			continue
		}
		if !found || r.ExpiresAt.Before(best.ExpiresAt) || (r.ExpiresAt.Equal(best.ExpiresAt) && r.ID < best.ID) {
			best, found = r, true
		}
	}
	if found {
		delete(s.tokens[name], best.ID)
	}
	return best, found, nil
}

// DropTokens implements ReservoirStore.
func (s *MemoryStore) DropTokens(ctx context.Context, name string, before time.Time) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return 0, ErrStoreClosed
	}
	n := 0
	for id, r := range s.tokens[name] {
		if r.ExpiresAt.Before(before) {
			delete(s.tokens[name], id)
			n++
		}
	}
	return n, nil
}

// TokenCounts implements ReservoirStore.
func (s *MemoryStore) TokenCounts(ctx context.Context) (map[string]int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, ErrStoreClosed
	}
	counts := map[string]int{}
	for name, stock := range s.tokens {
		if len(stock) > 0 {
			counts[name] = len(stock)
		}
	}
	return counts, nil
}

// Close implements Store.
func (s *MemoryStore) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrStoreClosed
	}
	s.closed = true
	s.recs = nil
	s.finished = nil
	return nil
}
