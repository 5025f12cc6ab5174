package bench

import (
	"context"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/captchaq/captchaq"
)

// ScaleConfig configures the scale scenario. Zero fields take defaults.
type ScaleConfig struct {
	Threads      int           // default 5000
	Tasks        int           // default 100000
	LatencyScale float64       // default 0.01
	PollInterval time.Duration // default 50 ms
	Seed         uint64
}

// MemSample is the process's memory at some progress.
type MemSample struct {
	Done      int
	HeapInuse uint64
	// Live is the heap allocated right after a forced collection.
	Live uint64
	RSS  uint64 // bytes, from /proc/self/status VmRSS (0 if unknown)
}

// ScaleReport is the scale scenario's outcome.
type ScaleReport struct {
	Config  ScaleConfig
	Row     Row
	Wall    time.Duration
	PeakRSS uint64 // bytes, getrusage maxrss: the process's peak so far
	Samples []MemSample
}

// Scale runs many tasks through the engine on a memory store against a
// fast simulator, feeding them with SubmitFunc (blocking past MaxQueued)
// and counting results without keeping them.
func Scale(ctx context.Context, c ScaleConfig) (ScaleReport, error) {
	if c.Threads == 0 {
		c.Threads = 5000
	}
	if c.Tasks == 0 {
		c.Tasks = 100_000
	}
	if c.LatencyScale == 0 {
		c.LatencyScale = 0.01
	}
	if c.PollInterval == 0 {
		c.PollInterval = 50 * time.Millisecond
	}
	if c.Seed == 0 {
		c.Seed = 1
	}
	rep := ScaleReport{Config: c}
	mix := Tasks(1000, MixRealistic, c.Seed)
	var mu sync.Mutex
	marks := []int{c.Tasks / 10, c.Tasks / 2, c.Tasks * 9 / 10}
	progress := func(done int) {
		for _, m := range marks {
			if done == m {
				var ms runtime.MemStats
				runtime.ReadMemStats(&ms)
				inuse := ms.HeapInuse
				// Live: what a collection now leaves, garbage not counted.
				runtime.GC()
				runtime.ReadMemStats(&ms)
				mu.Lock()
				rep.Samples = append(rep.Samples, MemSample{Done: done, HeapInuse: inuse, Live: ms.HeapAlloc, RSS: vmRSS()})
				mu.Unlock()
			}
		}
	}
	task := func(i int) captchaq.Task {
		t := mix[i%len(mix)]
		t.ID = fmt.Sprintf("scale-%07d", i)
		return t
	}
	start := time.Now()
	row, err := runEngine(ctx, Sim{Threads: c.Threads, Scale: c.LatencyScale, Seed: c.Seed, ForgetFast: true}, c.Tasks, task,
		EngineRun{Name: "engine, memory store", PollInterval: c.PollInterval, MaxQueued: 2 * c.Threads, RetryBackoff: 10 * time.Millisecond, Progress: progress})
	rep.Wall = time.Since(start)
	rep.Row = row
	rep.PeakRSS = maxRSS()
	return rep, err
}

func maxRSS() uint64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return uint64(ru.Maxrss) * 1024 // KiB on Linux
}

func vmRSS() uint64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			f := strings.Fields(rest)
			if len(f) > 0 {
				kb, _ := strconv.ParseUint(f[0], 10, 64)
				return kb * 1024
			}
		}
	}
	return 0
}

func mib(b uint64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

// Markdown writes the scale scenario's table.
func (r ScaleReport) Markdown(w io.Writer) {
	c, x := r.Config, r.Row
	fmt.Fprintf(w, "## scale: %d tasks, %d threads, latency scale %g, PollInterval %v, memory store\n\n", c.Tasks, c.Threads, c.LatencyScale, c.PollInterval)
	fmt.Fprintf(w, "The simulator runs in the same process; CPU time and memory include it.\n\n")
	tps := float64(x.Solved+x.Failed) / r.Wall.Seconds()
	cpuPer := time.Duration(0)
	if n := x.Solved + x.Failed; n > 0 {
		cpuPer = x.CPU / time.Duration(n)
	}
	fmt.Fprintln(w, "| solved | failed | wall | tasks/s | utilization | requests/solved | peak threads | CPU | CPU/task | peak RSS |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|")
	fmt.Fprintf(w, "| %d | %d | %s | %.0f | %.3f | %.3f | %d | %s | %v | %s |\n\n", x.Solved, x.Failed, secs(r.Wall), tps, x.Utilization,
		x.RequestsPerSolved, x.PeakThreads, x.CPU.Round(time.Millisecond), cpuPer.Round(time.Microsecond), mib(r.PeakRSS))
	fmt.Fprintln(w, "| progress | heap in use | live heap after a GC | RSS |")
	fmt.Fprintln(w, "|---|---|---|---|")
	for _, s := range r.Samples {
		fmt.Fprintf(w, "| %d%% (%d) | %s | %s | %s |\n", s.Done*100/max(c.Tasks, 1), s.Done, mib(s.HeapInuse), mib(s.Live), mib(s.RSS))
	}
	fmt.Fprintln(w)
}
