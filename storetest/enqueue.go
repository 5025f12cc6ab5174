package storetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/captchaq/captchaq"
)

func testEnqueueAssignsGrowingSeq(t *testing.T, s captchaq.Store) {
	first := []captchaq.Task{task("a"), task("b"), task("c")}
	recs1, existed1, err := s.Enqueue(context.Background(), first, t0)
	if err != nil {
		t.Fatal(err)
	}
	second := []captchaq.Task{task("d"), task("e")}
	recs2, existed2, err := s.Enqueue(context.Background(), second, at(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if d := diff([]bool{false, false, false, false, false}, append(existed1, existed2...)); d != "" {
		t.Errorf("existed (-want +got):\n%s", d)
	}
	recs := append(recs1, recs2...)
	tasks := append(first, second...)
	var prev int64
	for i, rec := range recs {
		if rec.Seq <= prev {
			t.Errorf("record %d (%s) has Seq %d, want more than %d", i, rec.Task.ID, rec.Seq, prev)
		}
		prev = rec.Seq
		now := t0
		if i >= len(first) {
			now = at(time.Minute)
		}
		want := captchaq.Record{Task: tasks[i], Status: captchaq.StatusQueued, Seq: rec.Seq, Fingerprint: tasks[i].Fingerprint(), AcceptedAt: now}
		if d := diff(want, rec); d != "" {
			t.Errorf("Enqueue record %d (-want +got):\n%s", i, d)
		}
		if d := diff(want, get(t, s, tasks[i].ID)); d != "" {
			t.Errorf("Get(%q) (-want +got):\n%s", tasks[i].ID, d)
		}
	}
}

func testEnqueueKnownID(t *testing.T, s captchaq.Store) {
	enqueue(t, s, t0, task("a"))
	checkpoint(t, s, "a", "cid-1", 1, at(time.Second))
	before := get(t, s, "a")

	changed := task("a")
	changed.Method = "userrecaptcha"
	changed.Priority = 1
	recs, existed, err := s.Enqueue(context.Background(), []captchaq.Task{changed, task("b")}, at(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if d := diff([]bool{true, false}, existed); d != "" {
		t.Errorf("existed (-want +got):\n%s", d)
	}
	if d := diff(before, recs[0]); d != "" {
		t.Errorf("record returned for the known id (-want +got):\n%s", d)
	}
	if d := diff(before, get(t, s, "a")); d != "" {
		t.Errorf("known id after a second Enqueue (-want +got):\n%s", d)
	}
	if recs[1].Seq <= before.Seq || recs[1].Status != captchaq.StatusQueued {
		t.Errorf("new task b: Seq %d status %q, want Seq > %d and queued", recs[1].Seq, recs[1].Status, before.Seq)
	}
}

func testEnqueueDuplicateInBatch(t *testing.T, s captchaq.Store) {
	x1, x2 := task("x"), task("x")
	x2.Method = "base64"
	x2.Params = map[string]string{"body": "second"}
	recs, existed, err := s.Enqueue(context.Background(), []captchaq.Task{x1, x2, task("y")}, t0)
	if err != nil {
		t.Fatal(err)
	}
	if d := diff([]bool{false, true, false}, existed); d != "" {
		t.Errorf("existed (-want +got):\n%s", d)
	}
	want := captchaq.Record{Task: x1, Status: captchaq.StatusQueued, Seq: recs[0].Seq, Fingerprint: x1.Fingerprint(), AcceptedAt: t0}
	if d := diff(want, recs[0]); d != "" {
		t.Errorf("first x (-want +got):\n%s", d)
	}
	if d := diff(want, recs[1]); d != "" {
		t.Errorf("second x must report the first (-want +got):\n%s", d)
	}
	if d := diff(want, get(t, s, "x")); d != "" {
		t.Errorf("Get(x) (-want +got):\n%s", d)
	}
	if d := diff([]string{"x", "y"}, ids(pending(t, s))); d != "" {
		t.Errorf("pending (-want +got):\n%s", d)
	}
}

func testEnqueueEmptyID(t *testing.T, s captchaq.Store) {
	_, _, err := s.Enqueue(context.Background(), []captchaq.Task{task("ok"), {Method: "turnstile"}}, t0)
	if err == nil {
		t.Fatal("Enqueue of a task without an id succeeded")
	}
	if got := pending(t, s); len(got) != 0 {
		t.Errorf("a failed Enqueue stored %v", ids(got))
	}
	if _, err := s.Get(context.Background(), "ok"); !errors.Is(err, captchaq.ErrNotFound) {
		t.Errorf("Get(ok) after a failed Enqueue: %v, want ErrNotFound", err)
	}
}

func testTaskRoundTrip(t *testing.T, s captchaq.Store) {
	full := captchaq.Task{
		ID:     "full/ü 'quoted' \"id\"",
		Method: "userrecaptcha",
		Params: map[string]string{
			"googlekey": "6Le-wvkSAAAAAPBMRTvw0Q4Muexq9bi0DJwx_mJ-",
			"pageurl":   "https://shop.example/login?next=%2Fcart&x=1",
			"empty":     "",
			"unicode":   "ключ 🔑 \x00 nul",
			"json":      `{"a":[1,2]}`,
		},
		Priority:    1,
		Tenant:      "team-ä",
		Deadline:    time.Date(2026, 3, 1, 13, 30, 15, 987654321, time.FixedZone("EST", -5*3600)),
		MaxAttempts: 7,
		Proxy:       "user:p@ss@10.0.0.1:3128",
		ProxyType:   "SOCKS5",
		Pingback:    "http://127.0.0.1:9/cb?id=1",
	}
	bare := captchaq.Task{ID: "bare", Method: "base64", Priority: -3}
	recs := enqueue(t, s, t0, full, bare)
	for i, tk := range []captchaq.Task{full, bare} {
		want := captchaq.Record{Task: tk, Status: captchaq.StatusQueued, Seq: recs[i].Seq, Fingerprint: tk.Fingerprint(), AcceptedAt: t0}
		if d := diff(want, recs[i]); d != "" {
			t.Errorf("Enqueue record of %q (-want +got):\n%s", tk.ID, d)
		}
		if d := diff(want, get(t, s, tk.ID)); d != "" {
			t.Errorf("Get(%q) (-want +got):\n%s", tk.ID, d)
		}
	}
	got := pending(t, s)
	if len(got) != 2 {
		t.Fatalf("Pending returned %d records, want 2", len(got))
	}
	if d := diff(full, got[0].Task); d != "" {
		t.Errorf("Pending task (-want +got):\n%s", d)
	}
}

// incompressible is n bytes of printable ASCII without repeats a
// compressor finds (PostgreSQL compresses an index entry before it
// checks its size).
func incompressible(n int, seed uint32) string {
	b := make([]byte, n)
	for i := range b {
		seed = seed*1664525 + 1013904223
		b[i] = byte('!' + (seed>>24)%94)
	}
	return string(b)
}

func testValidAtLimits(t *testing.T, s captchaq.Store) {
	long := captchaq.Task{
		ID:     incompressible(captchaq.MaxIDBytes, 1),
		Method: "turnstile",
		Params: map[string]string{"sitekey": "0x4AAA", "pageurl": "https://shop.example/checkout"},
		Tenant: incompressible(captchaq.MaxIDBytes, 2),
	}
	text := captchaq.Task{
		ID:     "ключ-🔑-\uFFFD-\x01\x7f",
		Method: "userrecaptcha",
		Params: map[string]string{
			"googlekey":   "6Le-wvkSAAAAAPBMRTvw0Q4Muexq9bi0DJwx_mJ-",
			"pageurl":     "https://shop.example/login?q=ü",
			"ключ 🔑":      "значение \uFFFD \x01\x1f\x7f \u2028 \\u0000 '\"",
			"\x7fcontrol": "\t\r\n",
		},
		Tenant:    "магазин \x01",
		Proxy:     "usér:pä\x01ss@10.0.0.1:3128",
		ProxyType: "HTTP",
		Pingback:  "https://hooks.example/cb?ü=\u2028",
	}
	tasks := []captchaq.Task{long, text}
	for _, tk := range tasks {
		if err := tk.Validate(); err != nil {
			t.Fatalf("the suite's task is not valid: %v", err)
		}
	}
	recs := enqueue(t, s, t0, tasks...)
	for i, tk := range tasks {
		want := captchaq.Record{Task: tk, Status: captchaq.StatusQueued, Seq: recs[i].Seq, Fingerprint: tk.Fingerprint(), AcceptedAt: t0}
		if d := diff(want, recs[i]); d != "" {
			t.Errorf("Enqueue record of task %d (-want +got):\n%s", i, d)
		}
		if d := diff(want, get(t, s, tk.ID)); d != "" {
			t.Errorf("Get of task %d (-want +got):\n%s", i, d)
		}
	}
	if got := ids(pending(t, s)); !cmp.Equal(got, []string{long.ID, text.ID}) {
		t.Errorf("Pending ids are %q, want the two tasks'", got)
	}
}

func testKnownIDOtherTask(t *testing.T, s captchaq.Store) {
	first := task("a")
	enqueue(t, s, t0, first)
	finish(t, s, solved("a", 1, at(time.Minute)))
	before := get(t, s, "a")
	if before.Fingerprint != first.Fingerprint() {
		t.Fatalf("stored fingerprint %q, want %q", before.Fingerprint, first.Fingerprint())
	}
	other := task("a")
	other.Params["sitekey"] = "0x4BBB-other"
	recs, existed, err := s.Enqueue(context.Background(), []captchaq.Task{other}, at(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if !existed[0] {
		t.Fatal("a known id with another task was not reported as existed")
	}
	if d := diff(before, recs[0]); d != "" {
		t.Errorf("record returned for the known id (-want +got):\n%s", d)
	}
	if d := diff(before, get(t, s, "a")); d != "" {
		t.Errorf("known id after Enqueue of another task (-want +got):\n%s", d)
	}
	var ce *captchaq.IDConflictError
	if err := recs[0].Conflict(other); !errors.As(err, &ce) || ce.ID != "a" || ce.Differs != "params.sitekey differs" {
		t.Errorf("Conflict = %v, want params.sitekey differs for a", err)
	}
	if err := recs[0].Conflict(first); err != nil {
		t.Errorf("Conflict with the same task = %v", err)
	}
}

func testRenew(t *testing.T, s captchaq.Store) {
	ctx := context.Background()
	recs := enqueue(t, s, t0, task("a"), task("q"), task("f"))
	finish(t, s, solved("a", 2, at(time.Minute)))
	finish(t, s, failed("f", "ERROR_CAPTCHA_UNSOLVABLE", 1, at(time.Minute)))
	again := task("a")
	again.Priority = 2
	rec, err := s.Renew(ctx, again, at(time.Hour))
	if err != nil {
		t.Fatalf("Renew: %v", err)
	}
	want := captchaq.Record{Task: again, Status: captchaq.StatusQueued, Seq: recs[0].Seq, Fingerprint: again.Fingerprint(), AcceptedAt: at(time.Hour)}
	if d := diff(want, rec); d != "" {
		t.Errorf("Renew record (-want +got):\n%s", d)
	}
	if d := diff(want, get(t, s, "a")); d != "" {
		t.Errorf("Get after Renew (-want +got):\n%s", d)
	}
	if got := ids(pending(t, s)); len(got) != 2 || got[0] != "a" || got[1] != "q" {
		t.Errorf("Pending after Renew = %v, want [a q]", got)
	}
	if got := resultIDs(results(t, s)); len(got) != 1 || got[0] != "f" {
		t.Errorf("Results after Renew = %v, want [f]", got)
	}
	for _, id := range []string{"q", "f", "a"} {
		before := get(t, s, id)
		if _, err := s.Renew(ctx, task(id), at(2*time.Hour)); err == nil {
			t.Errorf("Renew of %s task %q succeeded", before.Status, id)
		}
		if d := diff(before, get(t, s, id)); d != "" {
			t.Errorf("refused Renew changed %q (-want +got):\n%s", id, d)
		}
	}
	if _, err := s.Renew(ctx, task("nope"), t0); !errors.Is(err, captchaq.ErrNotFound) {
		t.Errorf("Renew of an unknown id: %v, want ErrNotFound", err)
	}
}
