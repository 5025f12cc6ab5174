package sqlite_test

import (
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/store/sqlite"
)

func TestReaderCreatesNothing(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	_, err := sqlite.OpenReader(t.Context(), filepath.Join(dir, "typo.db"))
	if err == nil || !strings.Contains(err.Error(), "does not exist (nothing was created)") {
		t.Fatalf("OpenReader of a missing file: %v", err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Fatalf("OpenReader of a missing file left %d files", len(ents))
	}
}

func TestReaderReadsWhileAQueueHoldsTheStore(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "q.db")
	s, err := sqlite.Open(t.Context(), path, sqlite.Config{Retention: sqlite.RetentionOff})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	tk := captchaq.Task{ID: "a", Method: "turnstile", Params: map[string]string{"sitekey": "k", "pageurl": "https://x.example"}}
	if _, _, err := s.Enqueue(ctx, []captchaq.Task{tk}, time.Now()); err != nil {
		t.Fatal(err)
	}
	if err := s.Finish(ctx, captchaq.Result{ID: "a", Status: captchaq.StatusSolved, Token: "tok", FinishedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	r, err := sqlite.OpenReader(ctx, path)
	if err != nil {
		t.Fatalf("OpenReader while the store is open: %v", err)
	}
	defer r.Close()
	var got []string
	if err := r.Results(ctx, func(res captchaq.Result) error { got = append(got, res.ID+"="+res.Token); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0] != "a=tok" {
		t.Fatalf("Results = %v", got)
	}
	if rec, err := r.Get(ctx, "a"); err != nil || rec.Fingerprint != tk.Fingerprint() {
		t.Fatalf("Get = %+v, %v", rec, err)
	}
}

func TestReaderReadsVersion1WithoutMigrating(t *testing.T) {
	t.Parallel()
	path := copyV1Store(t)
	r, err := sqlite.OpenReader(t.Context(), path)
	if err != nil {
		t.Fatal(err)
	}
	rec, err := r.Get(t.Context(), "job-0")
	r.Close()
	if err != nil || rec.Result == nil || rec.Result.Token != "0.old-token" {
		t.Fatalf("Get job-0 = %+v, %v", rec, err)
	}
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var v int
	if err := db.QueryRow(`SELECT version FROM schema_version`).Scan(&v); err != nil || v != 1 {
		t.Fatalf("schema version after reading: %d, %v; want 1", v, err)
	}
	if _, err := os.Stat(path + ".lock"); err == nil {
		t.Fatal("the reader made a lock file")
	}
}
