package bench

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/store/sqlite"
)

// StoreConfig configures the store scenario. Zero fields take defaults.
type StoreConfig struct {
	Mixed MixedConfig // tasks, threads, scale, seed of the utilization rows
	// PollInterval of the utilization rows, before Scale. Default 1 s.
	PollInterval time.Duration
	// LifecycleTasks and LifecycleThreads size the instant-simulator run.
	// Defaults 20000 and 1000.
	LifecycleTasks, LifecycleThreads int
	Log                              io.Writer
}

// StoreReport is the store scenario's outcome.
type StoreReport struct {
	Config             StoreConfig
	Memory, SQLite     Row
	LifeMem, LifeSQL   Row
	LifeMemW, LifeSQLW time.Duration
}

func openSQLite(ctx context.Context, dir string) (*sqlite.Store, error) {
	return sqlite.Open(ctx, filepath.Join(dir, "bench.db"), sqlite.Options{})
}

// Store compares the engine on the SQLite store (a file in a temporary
// directory) with the memory store on identical simulators, then measures
// whole lifecycles per second through each with an instant simulator.
func Store(ctx context.Context, c StoreConfig) (StoreReport, error) {
	c.Mixed = c.Mixed.withDefaults()
	if c.PollInterval == 0 {
		c.PollInterval = time.Second
	}
	if c.LifecycleTasks == 0 {
		c.LifecycleTasks = 20000
	}
	if c.LifecycleThreads == 0 {
		c.LifecycleThreads = 1000
	}
	rep := StoreReport{Config: c}
	m := c.Mixed
	s := Sim{Threads: m.Threads, Scale: m.Scale, Seed: m.Seed}
	tasks := Tasks(m.Tasks, MixRealistic, m.Seed)
	logf := func(format string, a ...any) {
		if c.Log != nil {
			fmt.Fprintf(c.Log, format+"\n", a...)
		}
	}
	run := func(name string, sqliteStore bool, s Sim, n int, pi time.Duration) (Row, time.Duration, error) {
		dir, err := os.MkdirTemp("", "captchaq-bench-")
		if err != nil {
			return Row{}, 0, err
		}
		defer os.RemoveAll(dir)
		e := EngineRun{Name: name, PollInterval: pi, RetryBackoff: scaled(time.Second, max(s.Scale, 0.01)), MaxQueued: 4 * s.Threads}
		if sqliteStore {
			st, err := openSQLite(ctx, dir)
			if err != nil {
				return Row{}, 0, err
			}
			defer st.Close()
			e.Store = st
		}
		logf("store: %s ...", name)
		start := time.Now()
		var row Row
		if n == len(tasks) {
			row, err = RunEngine(ctx, s, tasks, e)
		} else {
			mix := Tasks(1000, MixRealistic, m.Seed)
			row, err = runEngine(ctx, s, n, func(i int) captchaq.Task {
				t := mix[i%len(mix)]
				t.ID = fmt.Sprintf("life-%07d", i)
				return t
			}, e)
		}
		return row, time.Since(start), err
	}
	var err error
	pi := scaled(c.PollInterval, m.Scale)
	if rep.Memory, _, err = run("engine, memory store", false, s, len(tasks), pi); err != nil {
		return rep, err
	}
	if rep.SQLite, _, err = run("engine, SQLite store", true, s, len(tasks), pi); err != nil {
		return rep, err
	}
	inst := Sim{Threads: c.LifecycleThreads, Instant: true, Seed: m.Seed, ForgetFast: true}
	if rep.LifeMem, rep.LifeMemW, err = run("lifecycles, memory store", false, inst, c.LifecycleTasks, 10*time.Millisecond); err != nil {
		return rep, err
	}
	if rep.LifeSQL, rep.LifeSQLW, err = run("lifecycles, SQLite store", true, inst, c.LifecycleTasks, 10*time.Millisecond); err != nil {
		return rep, err
	}
	return rep, nil
}

// Markdown writes the store scenario's tables.
func (r StoreReport) Markdown(w io.Writer) {
	m := r.Config.Mixed
	fmt.Fprintf(w, "## store: SQLite vs memory\n\n%d mixed tasks, %d threads, scale %g, PollInterval %v (×%g), each on its own fresh simulator with the same seed.\n\n",
		m.Tasks, m.Threads, m.Scale, r.Config.PollInterval, m.Scale)
	fmt.Fprintln(w, "| run | solved | failed | utilization | ready→fetched p50 | p99 | requests/solved | makespan |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|")
	for _, x := range []Row{r.Memory, r.SQLite} {
		fmt.Fprintf(w, "| %s | %d | %d | %.3f | %.3f s | %.3f s | %.2f | %s |\n", x.Name, x.Solved, x.Failed, x.Utilization,
			x.ReadyToFetched.P50, x.ReadyToFetched.P99, x.RequestsPerSolved, secs(x.Makespan))
	}
	fmt.Fprintf(w, "\nWhole lifecycles (enqueue, submit, checkpoint, poll, finish) through the engine with an instant simulator, %d threads, %d tasks (target ≥ 5,000/s on SQLite):\n\n",
		r.Config.LifecycleThreads, r.Config.LifecycleTasks)
	fmt.Fprintln(w, "| store | solved | wall | lifecycles/s | CPU/task |")
	fmt.Fprintln(w, "|---|---|---|---|---|")
	for _, p := range []struct {
		x Row
		d time.Duration
	}{{r.LifeMem, r.LifeMemW}, {r.LifeSQL, r.LifeSQLW}} {
		n := p.x.Solved + p.x.Failed
		fmt.Fprintf(w, "| %s | %d | %s | %.0f | %v |\n", p.x.Name, p.x.Solved, secs(p.d), float64(n)/p.d.Seconds(),
			(p.x.CPU / time.Duration(max(n, 1))).Round(time.Microsecond))
	}
	fmt.Fprintln(w)
}
