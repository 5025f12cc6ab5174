package amqp

import (
	"context"
	"fmt"
	"testing"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/internal/simrig"
	"github.com/captchaq/captchaq/internal/tasktest"
	"github.com/captchaq/captchaq/sim"
)

// newRefusalPair is a providerPair whose two simulators both solve
// tasktest.BackupMethods and speak refusal in one service's words, by the
// protocol createTask says: "main" is preferred, "backup" takes what it
// refuses.
func newRefusalPair(t *testing.T, cfg Config, refusal sim.Refusal, createTask bool) *providerPair {
	t.Helper()
	p := &providerPair{}
	var sims [2]*sim.Server
	for i, name := range []string{"main", "backup"} {
		rig := simrig.Start(t, simrig.Options{CreateTask: createTask, Methods: tasktest.BackupMethods, Sim: sim.Config{
			Methods: tasktest.BackupMethods, Refusal: refusal, Threads: 50, LatencyScale: 0.01, Seed: 7, PollBan: sim.PollBan{Disabled: true}}})
		sims[i] = rig.Sim
		p.providers = append(p.providers, captchaq.ProviderConfig{Name: name, Provider: rig.Provider, Threads: []int{pairMainThreads, pairBackupThreads}[i],
			Methods: tasktest.BackupMethods})
	}
	p.main, p.backup = sims[0], sims[1]
	t.Cleanup(func() {
		if err := DeleteProviderThreads(context.Background(), cfg, "main", "backup"); err != nil {
			t.Errorf("delete the providers' thread pools: %v", err)
		}
	})
	return p
}

// TestFleetWithdrawnTypeGoesToTheOther: a type the preferred provider
// withdrew goes to the other one through a fleet of two workers, in the
// preferred service's words on either protocol: every task is solved
// there, none fails, and the preferred provider is sent one refused
// submit per worker at most; more tasks of the type cost none, and
// neither does a worker started after the others stopped: it knows the
// refusal from the broker (fleetState).
func TestFleetWithdrawnTypeGoesToTheOther(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		refusal    sim.Refusal
		createTask bool
	}{
		"2captcha in.php": {sim.Refusal2Captcha, false}, "capsolver createTask": {sim.RefusalCapSolver, true},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			cfg := testConfig(t)
			r := newGatewayRig(t, cfg)
			ctx := testCtx(t)
			p := newRefusalPair(t, cfg, tc.refusal, tc.createTask)
			p.main.Withdraw("hcaptcha")
			g, results := r.gateway("refused", nil, func(gc *GatewayConfig) { gc.Providers = p.providers })
			start := func(owner string) (stop func()) {
				w, err := NewWorker(setup(t, cfg), p.workerConfig(r, owner))
				if err != nil {
					t.Fatal(err)
				}
				return r.run(owner, w)
			}
			wave := func(prefix string, n int) {
				t.Helper()
				for i := range n {
					if err := g.submitTask(ctx, hcaptchaTask(fmt.Sprintf("%s%02d", prefix, i))); err != nil {
						t.Fatal(err)
					}
				}
				for _, res := range await(t, ctx, results, n) {
					if res.Status != captchaq.StatusSolved || res.Provider != "backup" || res.ErrorCode != "" {
						t.Errorf("%s: %s at %q (%s %s), want solved at the backup", res.ID, res.Status, res.Provider, res.ErrorCode, res.Error)
					}
				}
			}
			stop1, stop2 := start("refused-w1"), start("refused-w2")
			wave("a", 20)
			refused := p.main.Stats().Refused
			t.Logf("refused submits at main after the first wave: %d", refused)
			if refused < 1 || refused > 2 {
				t.Errorf("main refused %d submits, want 1 or 2: one per worker at most", refused)
			}
			wave("b", 10)
			stop1()
			stop2()
			start("refused-w3")
			wave("c", 10)
			if got := p.main.Stats().Refused; got != refused {
				t.Errorf("main refused %d submits after more tasks and a worker started later, want still %d", got, refused)
			}
			if got := p.backup.Stats().Calls.Submit; got != 40 {
				t.Errorf("the backup was sent %d submits, want the 40 tasks'", got)
			}
		})
	}
}
