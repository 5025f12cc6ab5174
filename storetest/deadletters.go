package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/captchaq/captchaq"
)

// deadLetterSetup stores a (failed X), b (solved), c (failed Y), d (failed
// X) and e (queued), in that Seq order.
func deadLetterSetup(t *testing.T, s captchaq.Store) map[string]captchaq.Result {
	t.Helper()
	enqueue(t, s, t0, task("a"), task("b"), task("c"), task("d"), task("e"))
	rs := map[string]captchaq.Result{
		"a": failed("a", "ERROR_X", 2, at(10*time.Second)),
		"b": solved("b", 1, at(11*time.Second)),
		"c": failed("c", "ERROR_Y", 3, at(12*time.Second)),
		"d": failed("d", "ERROR_X", 1, at(13*time.Second)),
	}
	// Finish in an order other than Seq's.
	for _, id := range []string{"d", "b", "c", "a"} {
		checkpoint(t, s, id, "cid-"+id, rs[id].Attempts, at(time.Second))
		finish(t, s, rs[id])
	}
	return rs
}

func testDeadLetterFilters(t *testing.T, s captchaq.Store) {
	rs := deadLetterSetup(t, s)
	tests := []struct {
		name   string
		filter captchaq.DeadLetterFilter
		want   []string
	}{
		{"zero selects none", captchaq.DeadLetterFilter{}, nil},
		{"all", captchaq.DeadLetterFilter{All: true}, []string{"a", "c", "d"}},
		{"ids in seq order, solved and unknown ignored", captchaq.DeadLetterFilter{IDs: []string{"d", "b", "zz", "a", "e"}}, []string{"a", "d"}},
		{"error code", captchaq.DeadLetterFilter{ErrorCode: "ERROR_X"}, []string{"a", "d"}},
		{"error code matches exactly", captchaq.DeadLetterFilter{ErrorCode: "ERROR"}, nil},
		{"ids and error code both match", captchaq.DeadLetterFilter{IDs: []string{"c", "d"}, ErrorCode: "ERROR_X"}, []string{"d"}},
		{"all with error code is all", captchaq.DeadLetterFilter{All: true, ErrorCode: "ERROR_Y"}, []string{"a", "c", "d"}},
	}
	for _, tc := range tests {
		got := deadLetters(t, s, tc.filter)
		if d := diff(tc.want, ids(got)); d != "" {
			t.Errorf("%s (-want +got):\n%s", tc.name, d)
		}
		for _, rec := range got {
			r := rs[rec.Task.ID]
			if rec.Status != captchaq.StatusFailed || rec.Result == nil {
				t.Errorf("%s: dead letter %s has status %q and result %v", tc.name, rec.Task.ID, rec.Status, rec.Result)
				continue
			}
			if d := diff(r, *rec.Result); d != "" {
				t.Errorf("%s: dead letter %s result (-want +got):\n%s", tc.name, rec.Task.ID, d)
			}
		}
	}
}

func testReplay(t *testing.T, s captchaq.Store) {
	ctx := context.Background()
	deadLetterSetup(t, s)
	before := map[string]captchaq.Record{}
	for _, id := range []string{"a", "b", "c", "d", "e"} {
		before[id] = get(t, s, id)
	}

	n, err := s.Replay(ctx, captchaq.DeadLetterFilter{ErrorCode: "ERROR_X"}, at(time.Hour))
	if err != nil || n != 2 {
		t.Fatalf("Replay(ERROR_X) = %d, %v; want 2, nil", n, err)
	}
	for _, id := range []string{"a", "d"} {
		want := before[id]
		want.Status = captchaq.StatusQueued
		want.Attempts = 0
		want.CaptchaID = ""
		want.NotBefore = time.Time{}
		want.SubmittedAt = time.Time{}
		want.AcceptedAt = at(time.Hour)
		want.Result = nil
		if d := diff(want, get(t, s, id)); d != "" {
			t.Errorf("replayed %s (-want +got):\n%s", id, d)
		}
	}
	for _, id := range []string{"b", "c", "e"} {
		if d := diff(before[id], get(t, s, id)); d != "" {
			t.Errorf("Replay changed %s (-want +got):\n%s", id, d)
		}
	}
	if d := diff([]string{"a", "d", "e"}, ids(pending(t, s))); d != "" {
		t.Errorf("Pending after Replay (-want +got):\n%s", d)
	}
	if d := diff([]string{"c"}, ids(deadLetters(t, s, captchaq.DeadLetterFilter{All: true}))); d != "" {
		t.Errorf("DeadLetters after Replay (-want +got):\n%s", d)
	}
	if d := diff([]string{"b", "c"}, resultIDs(results(t, s))); d != "" {
		t.Errorf("Results after Replay (-want +got):\n%s", d)
	}

	for _, f := range []captchaq.DeadLetterFilter{
		{ErrorCode: "ERROR_X"}, // already moved
		{IDs: []string{"b", "e", "zz"}},
		{},
	} {
		n, err := s.Replay(ctx, f, at(time.Hour))
		if err != nil || n != 0 {
			t.Errorf("Replay(%+v) = %d, %v; want 0, nil", f, n, err)
		}
	}
	n, err = s.Replay(ctx, captchaq.DeadLetterFilter{All: true}, at(time.Hour))
	if err != nil || n != 1 {
		t.Fatalf("Replay(All) = %d, %v; want 1, nil", n, err)
	}
	if d := diff([]string{"a", "c", "d", "e"}, ids(pending(t, s))); d != "" {
		t.Errorf("Pending after Replay(All) (-want +got):\n%s", d)
	}
}

// testDeadLetterTenant: dead letters of two tenants, interleaved in Seq.
func testDeadLetterTenant(t *testing.T, s captchaq.Store) {
	ctx := context.Background()
	var tasks []captchaq.Task
	for _, id := range []string{"a1", "b1", "a2", "b2", "a3"} {
		tk := task(id)
		tk.Tenant = id[:1]
		tasks = append(tasks, tk)
	}
	enqueue(t, s, t0, tasks...)
	finish(t, s, failed("a1", "ERROR_X", 1, at(time.Second)))
	finish(t, s, failed("b1", "ERROR_X", 1, at(time.Second)))
	finish(t, s, failed("a2", "ERROR_Y", 1, at(time.Second)))
	finish(t, s, failed("b2", "ERROR_Y", 1, at(time.Second)))
	finish(t, s, solved("a3", 1, at(time.Second)))
	for _, tc := range []struct {
		name   string
		filter captchaq.DeadLetterFilter
		want   []string
	}{
		{"all of a", captchaq.DeadLetterFilter{All: true, Tenant: "a"}, []string{"a1", "a2"}},
		{"all of b", captchaq.DeadLetterFilter{All: true, Tenant: "b"}, []string{"b1", "b2"}},
		{"all of nobody", captchaq.DeadLetterFilter{All: true, Tenant: "c"}, nil},
		{"ids of a only", captchaq.DeadLetterFilter{IDs: []string{"a1", "b1", "a3"}, Tenant: "a"}, []string{"a1"}},
		{"error code of b only", captchaq.DeadLetterFilter{ErrorCode: "ERROR_Y", Tenant: "b"}, []string{"b2"}},
		{"a tenant alone selects none", captchaq.DeadLetterFilter{Tenant: "a"}, nil},
	} {
		if d := diff(tc.want, ids(deadLetters(t, s, tc.filter))); d != "" {
			t.Errorf("%s (-want +got):\n%s", tc.name, d)
		}
	}
	n, err := s.Replay(ctx, captchaq.DeadLetterFilter{All: true, Tenant: "b"}, at(time.Hour))
	if err != nil || n != 2 {
		t.Fatalf("Replay(all of b) = %d, %v; want 2, nil", n, err)
	}
	if d := diff([]string{"a1", "a2"}, ids(deadLetters(t, s, captchaq.DeadLetterFilter{All: true}))); d != "" {
		t.Errorf("DeadLetters after replaying b's (-want +got):\n%s", d)
	}
	if d := diff([]string{"b1", "b2"}, ids(pending(t, s))); d != "" {
		t.Errorf("Pending after replaying b's (-want +got):\n%s", d)
	}
}
