package server_test

import (
	"encoding/json"
	"net/http"
	"regexp"
	"slices"
	"testing"
)

// /v1/stats speaks snake_case throughout, each metric under one name.
func TestStatsNamesAreSnakeCase(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	b.waitFinal(t, keyQA, b.inOK(t, keyQA, turnstile()))
	var st map[string]json.RawMessage
	b.api(t, "GET", "/v1/stats", keyAdmin, "", http.StatusOK, &st)
	snake := regexp.MustCompile(`^[a-z][a-z0-9]*(_[a-z0-9]+)*$`)
	for k := range st {
		if !snake.MatchString(k) {
			t.Errorf("/v1/stats has the field %q", k)
		}
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(st["metrics"], &m); err != nil {
		t.Fatal(err)
	}
	for k := range m {
		if !snake.MatchString(k) {
			t.Errorf("/v1/stats metrics has the field %q", k)
		}
	}
	for _, k := range []string{"submitted", "solved", "failed", "threads_in_use", "threads", "window", "queue_depth",
		"depth_by_priority", "avg_solve_seconds", "success_rate", "delivery_delay_p50", "paused", "providers", "started_at"} {
		if _, ok := m[k]; !ok {
			t.Errorf("metrics has no %q: %s", k, st["metrics"])
		}
	}
	if string(m["solved"]) != "1" || string(m["submitted"]) != "1" {
		t.Errorf("metrics solved %s submitted %s, want 1 and 1", m["solved"], m["submitted"])
	}
	var providers []map[string]json.RawMessage
	if err := json.Unmarshal(m["providers"], &providers); err != nil || len(providers) != 1 {
		t.Fatalf("metrics.providers = %s (%v)", m["providers"], err)
	}
	var keys []string
	for k := range providers[0] {
		keys = append(keys, k)
		if !snake.MatchString(k) {
			t.Errorf("metrics.providers[0] has the field %q", k)
		}
	}
	if _, named := providers[0]["name"]; named || !slices.Contains(keys, "threads_in_use") {
		t.Errorf("metrics.providers[0] of a one-provider queue = %s; want no empty name, and threads_in_use", m["providers"])
	}
	// The provider answers: no failures, no failing_since, answered once.
	if string(providers[0]["failures"]) != "0" || string(providers[0]["ever_answered"]) != "true" || providers[0]["failing_since"] != nil {
		t.Errorf("metrics.providers[0] reach = %s; want failures 0, ever_answered true, no failing_since", m["providers"])
	}
	var clients []map[string]json.RawMessage
	json.Unmarshal(st["clients"], &clients)
	for _, c := range clients {
		for k := range c {
			if !snake.MatchString(k) {
				t.Errorf("clients[] has the field %q", k)
			}
		}
	}
}
