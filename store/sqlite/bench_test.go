package sqlite_test

import (
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/provider"
	"github.com/captchaq/captchaq/store/sqlite"
	"github.com/captchaq/captchaq/storetest"
)

// BenchmarkLifecycle measures whole task lifecycles (Enqueue, Checkpoint,
// Finish, each acknowledged after its commit) from many callers at once,
// as a queue with many threads in flight makes them.
func BenchmarkLifecycle(b *testing.B) {
	for _, sync := range []sqlite.Synchronous{sqlite.SynchronousNormal, sqlite.SynchronousFull} {
		for _, callers := range []int{1, 64} {
			b.Run(fmt.Sprintf("%s/callers=%d", sync, callers), func(b *testing.B) {
				benchLifecycle(b, sync, callers)
			})
		}
	}
}

func benchLifecycle(b *testing.B, sync sqlite.Synchronous, callers int) {
	s, err := sqlite.Open(b.Context(), b.TempDir()+"/bench.db", sqlite.Config{Synchronous: sync, Retention: sqlite.RetentionOff})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close() })
	var next atomic.Int64
	now := time.Now()
	lifecycle := func() error {
		id := fmt.Sprintf("bench-%d", next.Add(1))
		task := captchaq.Task{ID: id, Method: "turnstile", Params: map[string]string{
			"sitekey": "0x4AAAAAAAC3DHQFLr1GavRN", "pageurl": "https://shop.example/checkout"}}
		if _, _, err := s.Enqueue(b.Context(), []captchaq.Task{task}, now); err != nil {
			return err
		}
		if err := s.Checkpoint(b.Context(), id, "7311223344", 1, now); err != nil {
			return err
		}
		return s.Finish(b.Context(), captchaq.Result{ID: id, Status: captchaq.StatusSolved, Method: "turnstile",
			Kind: provider.KindTurnstile, Token: "0.abcdefghijklmnopqrstuvwxyz0123456789", Attempts: 1,
			SolveSeconds: 9.5, AcceptedAt: now, SubmittedAt: now, FinishedAt: now})
	}
	b.ResetTimer()
	if callers == 1 {
		for b.Loop() {
			if err := lifecycle(); err != nil {
				b.Fatal(err)
			}
		}
	} else {
		b.SetParallelism((callers + runtime.GOMAXPROCS(0) - 1) / runtime.GOMAXPROCS(0))
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if err := lifecycle(); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "lifecycles/s")
}

// BenchmarkTakeToken measures TakeToken from a reservoir that holds a
// token for every take, all expiring at one time, by 1 taker and by 8
// at once.
func BenchmarkTakeToken(b *testing.B) {
	for _, takers := range []int{1, 8} {
		b.Run(fmt.Sprintf("takers=%d", takers), func(b *testing.B) {
			s, err := sqlite.Open(b.Context(), b.TempDir()+"/bench.db", sqlite.Config{Retention: sqlite.RetentionOff})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = s.Close() })
			storetest.BenchTakeToken(b, takers, s)
		})
	}
}
