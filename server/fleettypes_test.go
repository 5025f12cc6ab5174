package server_test

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/captchaq/captchaq/provider/createtask"
	"github.com/captchaq/captchaq/sim"
)

// Each new type (newTypes, wallTasks) is solved through the fleet, a
// gateway and a worker on the broker, from a provider of either
// protocol, for an unchanged client of either front: the task reaches
// the provider with its user agent, cookies and proxy (the simulator
// refuses a cf_clearance or DataDome task without its proxy), and the
// answer reaches every front as it does through serve, with the user
// agent it is bound to and nothing invented.
func TestNewTypesThroughTheFleet(t *testing.T) {
	t.Parallel()
	for _, createTask := range []bool{false, true} {
		t.Run(fmt.Sprintf("provider createTask %v", createTask), func(t *testing.T) {
			t.Parallel()
			f := newFleetRig(t, sim.Config{Methods: createtask.Carried, LatencyScale: 0.01, Seed: 7, PollBan: sim.PollBan{Disabled: true}})
			f.createTask, f.methods = createTask, createtask.Carried
			f.worker("types-w", 4)
			g := f.serve("types", filepath.Join(t.TempDir(), "gateway.db"), nil)
			// Every task is sent first, then each answer read: the
			// createTask provider's first poll waits seconds.
			ids := map[string]string{}
			for _, front := range []string{"createTask", "in.php"} {
				for _, tc := range newTypes() {
					ids[tc.name+"/front "+front] = tc.submit(t, g.bundle, front)
				}
				for _, tc := range wallTasks() {
					ids[tc.name+"/front "+front] = tc.submit(t, g.bundle, front)
				}
			}
			for _, front := range []string{"createTask", "in.php"} {
				for _, tc := range newTypes() {
					t.Run(tc.name+"/front "+front, func(t *testing.T) { tc.check(t, g.boundAnswers(t, ids[tc.name+"/front "+front])) })
				}
				for _, tc := range wallTasks() {
					t.Run(tc.name+"/front "+front, func(t *testing.T) { tc.check(t, g.sim, g.boundAnswers(t, ids[tc.name+"/front "+front])) })
				}
			}
		})
	}
}
