package amqp

import (
	"fmt"
	"strings"
	"testing"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/internal/tasktest"
	"github.com/captchaq/captchaq/internal/testbound"
	"github.com/captchaq/captchaq/sim"
)

// TestValidateTableGateway: the gateway accepts and refuses the shared
// table's tasks with the table's codes, before anything is published.
func TestValidateTableGateway(t *testing.T) {
	t.Parallel()
	r := newGatewayRig(t, testConfig(t))
	g, _ := r.gateway("validate", nil, nil)
	ctx := testCtx(t)
	valid := 0
	for i, c := range tasktest.Cases {
		err := g.submitTask(ctx, captchaq.Task{ID: fmt.Sprintf("case-%d", i), Method: c.Method, Params: c.Params})
		if c.Code == "" {
			valid++
			if err != nil {
				t.Errorf("%s: Submit = %v, want accepted", c.Name, err)
			}
			continue
		}
		if err == nil || captchaq.RefusalCode(err) != c.Code || !strings.Contains(err.Error(), c.Field) {
			t.Errorf("%s: Submit = %v; want code %s naming %q", c.Name, err, c.Code, c.Field)
		}
	}
	if n := depth(t, ctx, r.c, r.c.Names().Tasks); n != valid {
		t.Errorf("task queue holds %d, want the %d valid tasks", n, valid)
	}
}

// TestValidateTableWorker: tasks that reach the broker without a door's
// check (published raw) are dead-lettered by the worker with the table's
// codes, never sent to the provider.
func TestValidateTableWorker(t *testing.T) {
	t.Parallel()
	r := newGatewayRig(t, testConfig(t))
	ctx := testCtx(t)
	p := r.c.NewPublisher()
	defer p.Close()
	want := map[string]string{}
	for i, c := range tasktest.Cases {
		if c.Code == "" {
			continue
		}
		id := fmt.Sprintf("case-%d", i)
		want[id] = c.Code
		confirm, err := p.SendTask(ctx, TaskMessage{Task: captchaq.Task{ID: id, Method: c.Method, Params: c.Params}})
		if err != nil {
			t.Fatal(err)
		}
		if err := confirm(ctx); err != nil {
			t.Fatal(err)
		}
	}
	s := r.worker("validate-worker", sim.Config{LatencyScale: 0.01}, 2, 4)
	got := map[string]string{}
	testbound.Until(t, fmt.Sprintf("%d dead letters", len(want)), func() bool {
		got = map[string]string{}
		if err := r.c.DeadLetters(ctx, func(dl DeadLetter) error {
			got[dl.Task.Task.ID] = dl.ErrorCode
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return len(got) >= len(want)
	})
	for id, code := range want {
		if got[id] != code {
			t.Errorf("dead letter %s: code %q, want %q (all: %v)", id, got[id], code, got)
		}
	}
	if st := s.Stats(); st.Calls.Submit != 0 {
		t.Errorf("the provider got %d submits, want 0", st.Calls.Submit)
	}
}
