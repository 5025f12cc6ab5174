package sqlite

import (
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/captchaq/captchaq"
)

// TestCheckpointerCopiesTheWAL checks that the checkpoint loop copies the
// WAL into the database file while writes go on, and that writes without
// a pause still let the WAL start over, so its file stays bounded.
func TestCheckpointerCopiesTheWAL(t *testing.T) {
	t.Parallel()
	type run struct {
		walPages, copied int
		err              error
	}
	var (
		mu   sync.Mutex
		runs []run
	)
	s := OpenTemp(t, Config{Retention: RetentionOff, checkpointed: func(walPages, copied int, err error) {
		mu.Lock()
		runs = append(runs, run{walPages, copied, err})
		mu.Unlock()
	}})
	defer s.Close()
	path := s.Path()
	// One commit per task, each writing at least three pages (the table
	// and two indexes): six times walRestartPages.
	const tasks = 2 * walRestartPages
	for i := range tasks {
		task := captchaq.Task{ID: fmt.Sprintf("t%05d", i), Method: "turnstile", Params: map[string]string{"sitekey": "k", "pageurl": "https://a.example/"}}
		if _, _, err := s.Enqueue(t.Context(), []captchaq.Task{task}, time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	copying, restarts := 0, 0
	for i, r := range runs {
		if r.err != nil {
			t.Errorf("checkpoint %d failed: %v", i, r.err)
		}
		if r.copied > 0 {
			copying++
		}
		if i > 0 && r.walPages < runs[i-1].walPages {
			restarts++
		}
	}
	if copying < 2 {
		t.Fatalf("%d of %d checkpoints copied pages; want the loop to copy as the WAL grows", copying, len(runs))
	}
	if restarts == 0 {
		t.Errorf("the WAL never started over in %d checkpoints: %+v", len(runs), runs)
	}
	fi, err := os.Stat(path + "-wal")
	if err != nil {
		t.Fatal(err)
	}
	// A WAL file is a 32-byte header and frames of a 24-byte header and a
	// 4 KiB page; it grows to the most frames it ever held. The writer's
	// checkpoint at the backstop may find the loop's under way and try
	// again at its next commits, so the WAL can pass the backstop, by more
	// on a busy machine, where the loop's checkpoint takes longer (about
	// 1.4 times walRestartPages on a quiet one; without the backstop it
	// would hold every page written: six times).
	limit := int64(32 + 3*walRestartPages*(24+4096))
	if fi.Size() > limit {
		t.Errorf("WAL file is %d bytes, more than %d: it did not start over near %d pages", fi.Size(), limit, walRestartPages)
	}
	t.Logf("%d checkpoints, %d copied pages, the WAL started over %d times; WAL file %d bytes", len(runs), copying, restarts, fi.Size())
}
