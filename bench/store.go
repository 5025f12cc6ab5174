package bench

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
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
	// LifecycleRuns is how many instant-simulator runs each store makes,
	// memory and SQLite taking turns, so that load from elsewhere on the
	// machine falls on both. Default 3.
	LifecycleRuns int
	Log           io.Writer
}

// StoreReport is the store scenario's outcome.
type StoreReport struct {
	Config         StoreConfig
	Memory, SQLite Row
	// LifeMem and LifeSQL are the instant-simulator runs, in the order
	// they ran; BatchMem and BatchSQL the same runs with the tasks handed
	// over in one SolveBatch call.
	LifeMem, LifeSQL, BatchMem, BatchSQL []Row
}

func openSQLite(ctx context.Context, dir string) (*sqlite.Store, error) {
	return sqlite.Open(ctx, filepath.Join(dir, "bench.db"), sqlite.Config{})
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
	if c.LifecycleRuns == 0 {
		c.LifecycleRuns = 3
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
	run := func(name string, sqliteStore bool, s Sim, n int, pi time.Duration, batch bool) (Row, error) {
		dir, err := os.MkdirTemp("", "captchaq-bench-")
		if err != nil {
			return Row{}, err
		}
		defer os.RemoveAll(dir)
		e := EngineRun{Name: name, PollInterval: pi, RetryBackoff: scaled(time.Second, max(s.Scale, 0.01)), MaxQueued: 4 * s.Threads, SolveBatch: batch}
		if sqliteStore {
			st, err := openSQLite(ctx, dir)
			if err != nil {
				return Row{}, err
			}
			defer st.Close()
			e.Store = st
		}
		logf("store: %s ...", name)
		if n == len(tasks) {
			return RunEngine(ctx, s, tasks, e)
		}
		mix := Tasks(1000, MixRealistic, m.Seed)
		return runEngine(ctx, s, n, func(i int) captchaq.Task {
			t := mix[i%len(mix)]
			t.ID = fmt.Sprintf("life-%07d", i)
			return t
		}, e)
	}
	var err error
	pi := scaled(c.PollInterval, m.Scale)
	if rep.Memory, err = run("engine, memory store", false, s, len(tasks), pi, false); err != nil {
		return rep, err
	}
	if rep.SQLite, err = run("engine, SQLite store", true, s, len(tasks), pi, false); err != nil {
		return rep, err
	}
	inst := Sim{Threads: c.LifecycleThreads, Instant: true, Seed: m.Seed, ForgetFast: true}
	for range c.LifecycleRuns {
		for _, x := range []struct {
			name          string
			sqlite, batch bool
			rows          *[]Row
		}{
			{"lifecycles, memory store", false, false, &rep.LifeMem},
			{"lifecycles, SQLite store", true, false, &rep.LifeSQL},
			{"SolveBatch, memory store", false, true, &rep.BatchMem},
			{"SolveBatch, SQLite store", true, true, &rep.BatchSQL},
		} {
			row, err := run(x.name, x.sqlite, inst, c.LifecycleTasks, 10*time.Millisecond, x.batch)
			if err != nil {
				return rep, err
			}
			*x.rows = append(*x.rows, row)
		}
	}
	return rep, nil
}

// lifecyclesPerSecond is a run's results over its makespan.
func lifecyclesPerSecond(x Row) float64 {
	return float64(x.Solved+x.Failed) / x.Makespan.Seconds()
}

// medianRun returns the run of median makespan (the slower of the middle
// two for an even count), and the lowest and highest lifecycles per second.
func medianRun(runs []Row) (med Row, lo, hi float64) {
	sorted := slices.SortedFunc(slices.Values(runs), func(a, b Row) int { return cmp.Compare(a.Makespan, b.Makespan) })
	med = sorted[len(sorted)/2]
	return med, lifecyclesPerSecond(sorted[len(sorted)-1]), lifecyclesPerSecond(sorted[0])
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
	fmt.Fprintf(w, "\nWhole lifecycles (enqueue, submit, checkpoint, poll, finish) through the engine with an instant simulator, %d threads, %d tasks, "+
		"%d goroutines submitting (target ≥ 5,000/s on SQLite); the SolveBatch rows hand all the tasks over in one SolveBatch call instead. "+
		"Each row ran %d times, the four taking turns; the row is the run of median makespan "+
		"(first task handed to the engine to last result), the range covers all runs. CPU is the whole process's, simulator included; "+
		"cores is CPU ÷ makespan.\n\n", r.Config.LifecycleThreads, r.Config.LifecycleTasks, feeders, r.Config.LifecycleRuns)
	fmt.Fprintln(w, "| store | solved | makespan | lifecycles/s | range | CPU/task | cores |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|")
	for _, runs := range [][]Row{r.LifeMem, r.LifeSQL, r.BatchMem, r.BatchSQL} {
		if len(runs) == 0 {
			continue
		}
		x, lo, hi := medianRun(runs)
		n := x.Solved + x.Failed
		fmt.Fprintf(w, "| %s | %d | %.2f s | %.0f | %.0f–%.0f | %v | %.2f |\n", x.Name, x.Solved, x.Makespan.Seconds(), lifecyclesPerSecond(x),
			lo, hi, (x.CPU / time.Duration(max(n, 1))).Round(time.Microsecond), x.CPU.Seconds()/x.Makespan.Seconds())
	}
	fmt.Fprintln(w)
}
