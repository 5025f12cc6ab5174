package simrig_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/internal/simrig"
	"github.com/captchaq/captchaq/internal/testbound"
	"github.com/captchaq/captchaq/sim"
)

// TestRigSolvesByEachWay: on loopback and in-process, by in.php and by
// createTask, the rig's queue solves a task at its simulator, through the
// client the options chose, into the memory store it made.
func TestRigSolvesByEachWay(t *testing.T) {
	for _, inProcess := range []bool{false, true} {
		for _, createTask := range []bool{false, true} {
			t.Run(fmt.Sprintf("inProcess=%v/createTask=%v", inProcess, createTask), func(t *testing.T) {
				r := simrig.Start(t, simrig.Options{Sim: sim.Config{Instant: true, PollBan: sim.PollBan{Disabled: true}},
					InProcess: inProcess, CreateTask: createTask, Timeout: 10 * time.Second})
				if (r.CreateTask != nil) != createTask || (r.Client != nil) == createTask {
					t.Fatalf("in.php client %v, createTask client %v; want only the one chosen", r.Client != nil, r.CreateTask != nil)
				}
				q := r.Queue(t, captchaq.Config{PollInterval: 10 * time.Millisecond})
				if r.Store == nil {
					t.Fatal("no memory store made for a Config without one")
				}
				simrig.Run(t, q)
				ctx := testbound.Context(t)
				f, err := q.Submit(ctx, captchaq.Task{ID: "t1", Method: "turnstile", Params: map[string]string{
					"sitekey": "0x4AAAAAAAB", "pageurl": "https://example.com/t1"}})
				if err != nil {
					t.Fatal(err)
				}
				res, err := f.Wait(ctx)
				if err != nil || res.Status != captchaq.StatusSolved {
					t.Fatalf("result %+v, %v; want solved", res, err)
				}
				if got := r.Sim.Stats().Calls; got.Submit != 1 || (got.CreateTask > 0) != createTask {
					t.Errorf("simulator's calls %+v; want one submit, by createTask: %v", got, createTask)
				}
			})
		}
	}
}
