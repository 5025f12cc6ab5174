package lane

import (
	"testing"
	"time"

	"github.com/captchaq/captchaq/provider"
)

// A refusal holds its method off the lane for the hold, sends a later
// lane's tasks there at once (no spill-over wait), and leaves Unserved a
// class whose every lane refuses; after the hold one task probes, alone,
// and its acceptance lifts the refusal. A method not yet taken goes alone
// too; other methods are untouched.
func TestRefusalRouting(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	s := newSet(Config{Name: "a", Methods: []string{"hcaptcha", "turnstile"}, RefusalHold: time.Hour},
		Config{Name: "b", Methods: []string{"hcaptcha"}, SpillAfter: time.Minute, RefusalHold: time.Hour})
	a, b := s.Lanes()[0], s.Lanes()[1]
	h := Waiting{Class: s.Class("hcaptcha"), Route: "hcaptcha", Since: t0}
	route := func(l *Lane, now time.Time) (bool, time.Time) { return s.Route(l, h, now) }

	if ok, _ := route(a, t0); !ok {
		t.Fatal("a fresh lane does not take hcaptcha")
	}
	a.Refusals.Sending("hcaptcha")
	if ok, retry := route(a, t0); ok || !retry.IsZero() {
		t.Fatalf("a second hcaptcha while the first is in progress: %v %v, want held until its answer", ok, retry)
	}
	if ok, _ := s.Route(a, Waiting{Class: s.Class("turnstile"), Route: "turnstile"}, t0); !ok {
		t.Fatal("turnstile held by hcaptcha's first submit")
	}
	if ok, retry := route(b, t0); ok || !retry.Equal(t0.Add(time.Minute)) {
		t.Fatalf("b before a answers: %v %v, want its spill-over wait", ok, retry)
	}
	if !a.Refusals.Sent("hcaptcha", provider.Classify("submit", "ERROR_METHOD_CALL", ""), t0) {
		t.Fatal("a refusal did not change the refusals")
	}
	if ok, retry := route(a, t0); ok || !retry.Equal(t0.Add(time.Hour)) {
		t.Fatalf("a after its refusal: %v %v, want held an hour", ok, retry)
	}
	if ok, _ := route(b, t0); !ok {
		t.Fatal("b does not take hcaptcha at once while a refuses it")
	}
	if s.Unserved(h.Class, "hcaptcha", t0) {
		t.Fatal("unserved while b takes it")
	}
	b.Refusals.Sent("hcaptcha", provider.Classify("submit", "ERROR_TASK_NOT_SUPPORTED", ""), t0)
	if !s.Unserved(h.Class, "hcaptcha", t0) {
		t.Fatal("served while both refuse it")
	}
	if got := s.Refusals(); len(got) != 2 || got[0].Provider != "a" || got[0].Code != "ERROR_METHOD_CALL" || !got[0].Until.Equal(t0.Add(time.Hour)) {
		t.Fatalf("refusals %+v", got)
	}

	later := t0.Add(time.Hour)
	if s.Unserved(h.Class, "hcaptcha", later) {
		t.Fatal("unserved after the hold")
	}
	if ok, _ := route(a, later); !ok {
		t.Fatal("no probe after the hold")
	}
	a.Refusals.Sending("hcaptcha")
	if ok, _ := route(a, later); ok {
		t.Fatal("a second probe while the first is in progress")
	}
	if !a.Refusals.Sent("hcaptcha", nil, later) || len(a.Refusals.List()) != 0 {
		t.Fatalf("an accepted probe left %+v", a.Refusals.List())
	}
	a.Refusals.Sending("hcaptcha")
	if ok, _ := route(a, later); !ok {
		t.Fatal("a taken type went alone")
	}

	// Stored refusals come back to their lane only.
	c := newSet(Config{Name: "a", RefusalHold: time.Hour}, Config{Name: "b", RefusalHold: time.Hour})
	c.Lanes()[0].Refusals.Restore(s.Refusals())
	if got := c.Lanes()[0].Refusals.List(); len(got) != 0 {
		t.Fatalf("a restored %+v, want none (b's refusal only)", got)
	}
	c.Lanes()[1].Refusals.Restore(s.Refusals())
	if !c.Lanes()[1].Refusals.Refuses("hcaptcha", t0) {
		t.Fatal("b's stored refusal not restored")
	}
}

// With a negative hold a refusal holds nothing.
func TestRefusalOff(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	s := newSet(Config{Name: "a", RefusalHold: -1}, Config{Name: "b", RefusalHold: -1})
	a := s.Lanes()[0]
	a.Refusals.Sending("hcaptcha")
	if a.Refusals.Sent("hcaptcha", provider.Classify("submit", "ERROR_METHOD_CALL", ""), t0) || a.Refusals.Refuses("hcaptcha", t0) {
		t.Fatal("a refusal held with the hold off")
	}
	if ok, _ := a.Refusals.Takes("hcaptcha", t0); !ok {
		t.Fatal("hcaptcha held with the hold off")
	}
}
