package bench

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/captchaq/captchaq"
)

// Defaults of the mixed scenario.
const (
	MixedTasksDefault   = 300
	MixedThreadsDefault = 20
	SeedPollDefault     = 5 * time.Second // the seed's asyncio.sleep(5)
)

// PollIntervalsDefault are the engine's PollInterval values the mixed
// scenario tries (at scale 1), to show the frontier.
var PollIntervalsDefault = []time.Duration{500 * time.Millisecond, time.Second, 2 * time.Second}

// ScriptPollDefault is the bulk-poll script's interval (at scale 1).
const ScriptPollDefault = 500 * time.Millisecond

// The engine's targets at its defaults, at scale 1: beyond the
// fixed-interval frontier, where the script and every PollInterval row sit.
const (
	TargetUtilization    = 0.95
	TargetReadyP50       = 200 * time.Millisecond
	TargetReadyP99       = 600 * time.Millisecond
	TargetRequestsPerJob = 1.46
	// TargetMakespanFloor bounds the makespan as a multiple of the floor
	// (Row.Floor).
	TargetMakespanFloor = 1.06
)

// MixedConfig configures the mixed scenario. Zero fields take defaults.
type MixedConfig struct {
	Tasks   int
	Threads int
	// Scale multiplies every latency, the poll ban's window, the seed's
	// poll and the engine's PollInterval (1: realistic).
	Scale float64
	Seed  uint64
	// Mix names the task mix, a key of Mixes (default "realistic").
	Mix string
	// PollIntervals are the engine rows' PollInterval before Scale.
	PollIntervals []time.Duration
	// PingbackPoll is the pingback row's PollInterval before Scale
	// (default 1 s); NoPingback leaves the row out.
	PingbackPoll time.Duration
	NoPingback   bool
	// SeedPoll is the seed model's poll before Scale (default 5 s).
	SeedPoll time.Duration
	// ScriptPoll is the bulk-poll script's interval before Scale
	// (default ScriptPollDefault).
	ScriptPoll time.Duration
	// Log, when set, gets a line as each row starts and ends.
	Log io.Writer
}

func (c MixedConfig) withDefaults() MixedConfig {
	if c.Tasks == 0 {
		c.Tasks = MixedTasksDefault
	}
	if c.Threads == 0 {
		c.Threads = MixedThreadsDefault
	}
	if c.Scale == 0 {
		c.Scale = 1
	}
	if c.Seed == 0 {
		c.Seed = 1
	}
	if c.Mix == "" {
		c.Mix = "realistic"
	}
	if len(c.PollIntervals) == 0 {
		c.PollIntervals = PollIntervalsDefault
	}
	if c.PingbackPoll == 0 {
		c.PingbackPoll = time.Second
	}
	if c.SeedPoll == 0 {
		c.SeedPoll = SeedPollDefault
	}
	if c.ScriptPoll == 0 {
		c.ScriptPoll = ScriptPollDefault
	}
	return c
}

func scaled(d time.Duration, f float64) time.Duration { return time.Duration(float64(d) * f) }

// MixedReport is the mixed scenario's outcome: the seed model's row, the
// script's, then the engine's (its defaults first).
type MixedReport struct {
	Config MixedConfig
	Seed   Row
	Script Row
	Engine []Row
	// Bounds are what any client polling under the default per-id gap can
	// reach on this batch.
	Bounds PollBounds
}

// DefaultsRow names the engine's row at its default settings.
const DefaultsRow = "engine, defaults"

// Mixed runs the mixed scenario: the seed model, the bulk-poll script,
// the engine at its defaults, then at each PollInterval, then with
// pingbacks, each on its own fresh simulator with the same settings and
// seed.
func Mixed(ctx context.Context, c MixedConfig) (MixedReport, error) {
	c = c.withDefaults()
	if c.Tasks < 0 || c.Threads < 0 || c.Scale < 0 {
		return MixedReport{}, fmt.Errorf("bench: tasks, threads and scale must be positive")
	}
	mix, ok := Mixes[c.Mix]
	if !ok {
		return MixedReport{}, fmt.Errorf("bench: mix %q: use one of %s", c.Mix, strings.Join(MixNames(), ", "))
	}
	rep := MixedReport{Config: c}
	s := Sim{Threads: c.Threads, Scale: c.Scale, Seed: c.Seed, Latency: MixLatency[c.Mix]}
	tasks := Tasks(c.Tasks, mix, c.Seed)
	var err error
	if rep.Bounds, err = Bounds(tasks, s, scaled(captchaq.PollGapDefault, c.Scale), c.Seed); err != nil {
		return rep, err
	}
	logf := func(format string, a ...any) {
		if c.Log != nil {
			fmt.Fprintf(c.Log, format+"\n", a...)
		}
	}
	name := fmt.Sprintf("seed model (poll every %v)", c.SeedPoll)
	logf("mixed: %s ...", name)
	row, err := RunSeed(ctx, s, tasks, SeedRun{Name: name, PollEvery: scaled(c.SeedPoll, c.Scale)})
	if err != nil {
		return rep, err
	}
	logf("mixed: %s: makespan %v", name, row.Makespan.Round(time.Millisecond))
	rep.Seed = row
	name = fmt.Sprintf("script (bulk poll every %v)", c.ScriptPoll)
	logf("mixed: %s ...", name)
	if rep.Script, err = RunScript(ctx, s, tasks, ScriptRun{Name: name, PollEvery: scaled(c.ScriptPoll, c.Scale)}); err != nil {
		return rep, err
	}
	logf("mixed: %s: makespan %v", name, rep.Script.Makespan.Round(time.Millisecond))
	// The defaults row scales only the provider's per-id poll gap, from
	// which the default scheduler derives its other times.
	// (The queue itself starts the longest kinds of a batch handed over
	// at once first, so a LongestFirst row would measure the same.)
	runs := []EngineRun{{Name: DefaultsRow, PollGap: scaled(captchaq.PollGapDefault, c.Scale)}}
	for _, pi := range c.PollIntervals {
		runs = append(runs, EngineRun{Name: fmt.Sprintf("engine, PollInterval %v", pi), PollInterval: scaled(pi, c.Scale)})
	}
	if !c.NoPingback {
		runs = append(runs, EngineRun{Name: fmt.Sprintf("engine + pingback (PollInterval %v)", c.PingbackPoll), PollInterval: scaled(c.PingbackPoll, c.Scale), Pingback: true})
	}
	for _, e := range runs {
		e.RetryBackoff = scaled(time.Second, c.Scale)
		logf("mixed: %s ...", e.Name)
		row, err := RunEngine(ctx, s, tasks, e)
		if err != nil {
			return rep, err
		}
		logf("mixed: %s: makespan %v", e.Name, row.Makespan.Round(time.Millisecond))
		rep.Engine = append(rep.Engine, row)
	}
	return rep, nil
}

// Verdicts are an engine row's pass/fail per target.
type Verdicts struct {
	Utilization, ReadyP50, ReadyP99, Requests, Makespan bool
}

// All is true when every target passes.
func (v Verdicts) All() bool {
	return v.Utilization && v.ReadyP50 && v.ReadyP99 && v.Requests && v.Makespan
}

// Judge compares a row with the targets (latencies scaled) and its
// makespan with its floor.
func (r MixedReport) Judge(row Row) Verdicts {
	f := r.Config.Scale
	return Verdicts{
		Utilization: row.Utilization >= TargetUtilization,
		ReadyP50:    row.ReadyToFetched.P50 <= scaled(TargetReadyP50, f).Seconds(),
		ReadyP99:    row.ReadyToFetched.P99 <= scaled(TargetReadyP99, f).Seconds(),
		Requests:    row.RequestsPerSolved <= TargetRequestsPerJob,
		Makespan:    row.Floor > 0 && float64(row.Makespan) <= TargetMakespanFloor*float64(row.Floor),
	}
}

// Frontier is (requests per solved task − 1) × (1 − utilization): the
// price of polling, which fixed-interval bulk polling cannot push below
// about 1/(2×threads).
func Frontier(row Row) float64 {
	return (row.RequestsPerSolved - 1) * (1 - row.Utilization)
}
