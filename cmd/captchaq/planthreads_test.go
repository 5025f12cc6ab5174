package main

import (
	"errors"
	"strings"
	"testing"
)

func TestPlanThreads(t *testing.T) {
	for _, c := range []struct {
		threads int
		plan    string
		useSim  bool
		want    int
	}{
		{0, "", false, 0},
		{0, "", true, simThreadsDefault},
		{7, "BASIC", true, 7},
		{0, "BASIC", true, 5},
		{0, "standard", false, 15},
	} {
		got, err := planThreads(c.threads, c.plan, c.useSim)
		if err != nil || got != c.want {
			t.Errorf("planThreads(%d, %q, %v) = %d, %v; want %d", c.threads, c.plan, c.useSim, got, err, c.want)
		}
	}
	_, err := planThreads(0, "GOLD", true)
	var ee *exitError
	if !errors.As(err, &ee) || ee.code != exitUsage || !strings.HasPrefix(err.Error(), `--plan: unknown plan "GOLD"`) {
		t.Errorf("unknown plan: %v, want a usage error naming --plan", err)
	}
}
