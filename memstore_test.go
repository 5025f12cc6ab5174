package captchaq

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func TestMemoryStoreLifecycle(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := NewMemoryStore(MemoryStoreConfig{})
	recs, existed, err := s.Enqueue(ctx, []Task{{ID: "a", Method: "turnstile"}, {ID: "b"}, {ID: "a"}}, t0)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(existed, []bool{false, false, true}) || recs[0].Seq != 1 || recs[1].Seq != 2 || recs[2].Seq != 1 {
		t.Fatalf("existed %v seqs %d %d %d", existed, recs[0].Seq, recs[1].Seq, recs[2].Seq)
	}
	if err := s.Checkpoint(ctx, "b", "777", 1, t0); err != nil {
		t.Fatal(err)
	}
	if err := s.Retry(ctx, "a", 1, t0.Add(time.Second), "unsolvable", "ERROR_CAPTCHA_UNSOLVABLE"); err != nil {
		t.Fatal(err)
	}
	var pending []string
	s.Pending(ctx, func(r Record) error {
		pending = append(pending, r.Task.ID+":"+string(r.Status)+":"+r.CaptchaID)
		return nil
	})
	if !slices.Equal(pending, []string{"a:queued:", "b:inflight:777"}) {
		t.Fatalf("pending %v", pending)
	}
	if err := s.Finish(ctx, Result{ID: "a", Status: StatusFailed, ErrorCode: "X", Attempts: 3, FinishedAt: t0}); err != nil {
		t.Fatal(err)
	}
	if err := s.Finish(ctx, Result{ID: "b", Status: StatusSolved, Token: "tok", Attempts: 1, FinishedAt: t0.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	var dead []string
	s.DeadLetters(ctx, DeadLetterFilter{ErrorCode: "X"}, func(r Record) error { dead = append(dead, r.Task.ID); return nil })
	if !slices.Equal(dead, []string{"a"}) {
		t.Fatalf("dead %v", dead)
	}
	if n, _ := s.Replay(ctx, DeadLetterFilter{}, t0); n != 0 {
		t.Fatalf("zero filter replayed %d", n)
	}
	if n, _ := s.Replay(ctx, DeadLetterFilter{IDs: []string{"a"}}, t0); n != 1 {
		t.Fatalf("replayed %d", n)
	}
	r, _ := s.Get(ctx, "a")
	if r.Status != StatusQueued || r.Attempts != 0 || r.Result != nil {
		t.Fatalf("replayed record %+v", r)
	}
	if n, _ := s.Prune(ctx, t0.Add(time.Minute)); n != 0 {
		t.Fatalf("pruned %d, b finished later", n)
	}
	if n, _ := s.Prune(ctx, t0.Add(2*time.Hour)); n != 1 {
		t.Fatalf("pruned %d", n)
	}
	if _, err := s.Get(ctx, "b"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get pruned: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(ctx, "a"); !errors.Is(err, ErrStoreClosed) {
		t.Fatalf("after Close: %v", err)
	}
}

func TestMemoryStoreBoundsFinished(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := NewMemoryStore(MemoryStoreConfig{MaxFinished: 3})
	for i := range 10 {
		id := fmt.Sprint(i)
		s.Enqueue(ctx, []Task{{ID: id}}, t0)
		if i%2 == 0 {
			s.Finish(ctx, Result{ID: id, Status: StatusSolved})
		}
	}
	var ids []string
	s.Results(ctx, func(r Result) error { ids = append(ids, r.ID); return nil })
	if !slices.Equal(ids, []string{"4", "6", "8"}) {
		t.Fatalf("kept results %v", ids)
	}
	n := 0
	s.Pending(ctx, func(Record) error { n++; return nil })
	if n != 5 {
		t.Fatalf("pending %d, want 5 (never dropped)", n)
	}
}
