package bench

import (
	"testing"
	"time"
)

// BenchmarkMixed runs the mixed scenario at scale 0.05 (30 tasks, 10
// threads) and reports the engine's and the seed model's key numbers.
func BenchmarkMixed(b *testing.B) {
	for b.Loop() {
		rep, err := Mixed(b.Context(), MixedConfig{Tasks: 30, Threads: 10, Scale: 0.05, PollIntervals: []time.Duration{time.Second}})
		if err != nil {
			b.Fatal(err)
		}
		e, p := rep.Engine[0], rep.Engine[2] // defaults, pingback
		b.ReportMetric(e.Utilization, "util")
		b.ReportMetric(e.RequestsPerSolved, "req/task")
		b.ReportMetric(e.ReadyToFetched.P50/0.05, "p50_s@scale1")
		b.ReportMetric(float64(e.Makespan)/float64(e.Floor), "makespan/floor")
		b.ReportMetric(rep.Seed.Utilization, "seed_util")
		b.ReportMetric(p.RequestsPerSolved, "pingback_req/task")
	}
}

// BenchmarkScale runs 10,000 tasks on 1,000 threads through the engine.
func BenchmarkScale(b *testing.B) {
	for b.Loop() {
		rep, err := Scale(b.Context(), ScaleConfig{Threads: 1000, Tasks: 10000})
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(rep.Row.Solved)/rep.Wall.Seconds(), "tasks/s")
		b.ReportMetric(float64(rep.Row.CPU.Microseconds())/float64(rep.Row.Solved), "cpu_us/task")
	}
}
