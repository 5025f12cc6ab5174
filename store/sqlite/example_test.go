package sqlite_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/store/sqlite"
)

func Example() {
	dir, _ := os.MkdirTemp("", "captchaq-example")
	defer os.RemoveAll(dir)
	ctx := context.Background()

	s, err := sqlite.Open(ctx, filepath.Join(dir, "captchaq.db"), sqlite.Config{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer s.Close()

	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	tasks := []captchaq.Task{
		{ID: "checkout-1", Method: "turnstile", Params: map[string]string{"sitekey": "0x4AAA", "pageurl": "https://shop.example/checkout"}},
		{ID: "checkout-1", Method: "turnstile"}, // the same id again: kept once
	}
	recs, existed, _ := s.Enqueue(ctx, tasks, now)
	fmt.Println(recs[0].Task.ID, recs[0].Status, existed)

	_ = s.Checkpoint(ctx, "checkout-1", "7311223344", 1, now.Add(time.Second))
	_ = s.Finish(ctx, captchaq.Result{ID: "checkout-1", Status: captchaq.StatusSolved, Method: "turnstile",
		Token: "0.xyz", Attempts: 1, FinishedAt: now.Add(9 * time.Second)})

	_ = s.Results(ctx, func(r captchaq.Result) error {
		fmt.Println(r.ID, r.Status, r.Token, r.FinishedAt.Format(time.RFC3339))
		return nil
	})
	// Output:
	// checkout-1 queued [false true]
	// checkout-1 solved 0.xyz 2026-03-01T12:00:09Z
}
