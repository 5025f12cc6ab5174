package sqlite_test

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/provider"
	"github.com/captchaq/captchaq/store/sqlite"
)

// BenchmarkLifecycle measures whole task lifecycles (Enqueue, Checkpoint,
// Finish, each acknowledged after its commit) from many callers at once,
// as a queue with many threads in flight makes them.
func BenchmarkLifecycle(b *testing.B) {
	for _, sync := range []sqlite.Synchronous{sqlite.SynchronousNormal, sqlite.SynchronousFull} {
		b.Run(string(sync), func(b *testing.B) {
			s, err := sqlite.Open(b.Context(), b.TempDir()+"/bench.db", sqlite.Options{Synchronous: sync})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = s.Close() })
			var next atomic.Int64
			now := time.Now()
			b.SetParallelism(32) // 64 callers on 2 cores
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				ctx := b.Context()
				for pb.Next() {
					id := fmt.Sprintf("bench-%d", next.Add(1))
					task := captchaq.Task{ID: id, Method: "turnstile", Params: map[string]string{
						"sitekey": "0x4AAAAAAAC3DHQFLr1GavRN", "pageurl": "https://shop.example/checkout"}}
					if _, _, err := s.Enqueue(ctx, []captchaq.Task{task}, now); err != nil {
						b.Error(err)
						return
					}
					if err := s.Checkpoint(ctx, id, "7311223344", 1, now); err != nil {
						b.Error(err)
						return
					}
					if err := s.Finish(ctx, captchaq.Result{ID: id, Status: captchaq.StatusSolved, Method: "turnstile",
						Kind: provider.KindTurnstile, Token: "0.abcdefghijklmnopqrstuvwxyz0123456789", Attempts: 1,
						SolveSeconds: 9.5, AcceptedAt: now, SubmittedAt: now, FinishedAt: now}); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "lifecycles/s")
		})
	}
}
