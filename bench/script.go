package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/provider"
	"github.com/captchaq/captchaq/sim"
)

// ScriptRun configures the bulk-poll script: the few dozen lines a user
// would write instead of the engine. It keeps every thread submitted and
// asks for every id in flight with one bulk request, submits again right
// after each poll, and sleeps PollEvery. It is the fixed-interval bulk
// poller that sits on the frontier (requests/task − 1) × (1 − utilization)
// ≈ 1/(2×threads), the line the engine's defaults must beat.
type ScriptRun struct {
	Name      string
	PollEvery time.Duration
}

// RunScript solves tasks the way the script does against a fresh
// simulator. A task answered unsolvable or refused counts as failed; a
// "no free thread" refusal is retried at the next tick.
func RunScript(ctx context.Context, s Sim, tasks []captchaq.Task, r ScriptRun) (Row, error) {
	srv, base, err := sim.Start(s.config(), "127.0.0.1:0")
	if err != nil {
		return Row{}, fmt.Errorf("bench: start simulator: %w", err)
	}
	defer srv.Close()
	client, err := provider.NewClient(provider.ClientConfig{BaseURL: base, Key: benchKey, HTTPClient: httpClient(s.Threads)})
	if err != nil {
		return Row{}, err
	}
	cpu0 := CPUTime()
	start := time.Now()
	row := Row{Name: r.Name}
	var inflight []string
	next := 0
	fill := func() {
		for len(inflight) < s.Threads && next < len(tasks) {
			id, err := client.Submit(ctx, tasks[next].ProviderTask(), "")
			if provider.ClassOf(err) == provider.ClassNoSlot {
				return
			}
			next++
			if err != nil {
				row.Failed++
				continue
			}
			inflight = append(inflight, id)
		}
	}
	// It sleeps PollEvery between rounds, as asyncio.sleep would: a ticker
	// could fire twice in quick succession after a slow round and poll an
	// id more often than the provider allows.
	sleep := time.NewTimer(time.Hour)
	defer sleep.Stop()
	for fill(); len(inflight) > 0 || next < len(tasks); fill() {
		sleep.Reset(r.PollEvery)
		select {
		case <-sleep.C:
		case <-ctx.Done():
			return row, ctx.Err()
		}
		var still []string
		for i := 0; i < len(inflight); i += 100 {
			ids := inflight[i:min(i+100, len(inflight))]
			res, err := client.PollMany(ctx, ids)
			if err != nil {
				still = append(still, ids...)
				continue
			}
			for j, p := range res {
				switch {
				case p.Ready:
					row.Solved++
				case p.Err != nil:
					row.Failed++
				default:
					still = append(still, ids[j])
				}
			}
		}
		inflight = still
	}
	row.Makespan, row.CPU = time.Since(start), CPUTime()-cpu0
	row.fill(srv.Stats())
	return row, nil
}
