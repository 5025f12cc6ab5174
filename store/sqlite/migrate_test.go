package sqlite_test

import (
	"database/sql"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/store/sqlite"
)

// copyV1Store copies testdata/v1.db, written by captchaq's store at schema
// version 1 (before fingerprints): job-0 solved with token 0.old-token,
// job-1 queued. It returns the copy's path.
func copyV1Store(t *testing.T) string {
	t.Helper()
	raw, err := os.ReadFile("testdata/v1.db")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "v1.db")
	if err := os.WriteFile(path, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestOpenMigratesVersion1Store(t *testing.T) {
	t.Parallel()
	path := copyV1Store(t)
	s, err := sqlite.Open(t.Context(), path, sqlite.Config{Retention: sqlite.RetentionOff})
	if err != nil {
		t.Fatalf("Open of a version 1 store: %v", err)
	}
	defer s.Close()
	old, err := s.Get(t.Context(), "job-0")
	if err != nil {
		t.Fatal(err)
	}
	if old.Status != captchaq.StatusSolved || old.Result == nil || old.Result.Token != "0.old-token" || old.Fingerprint != "" ||
		old.Result.Provider != "" || old.Result.Price != 0 || old.Result.Abandoned != nil {
		t.Fatalf("job-0 after migration: %+v", old)
	}
	same := captchaq.Task{ID: "job-0", Method: "turnstile", Params: map[string]string{"sitekey": "0x4AAAAAAAold", "pageurl": "https://old.example/a"}}
	other := captchaq.Task{ID: "job-0", Method: "turnstile", Params: map[string]string{"sitekey": "0x4AAAAAAAnew", "pageurl": "https://new.example/a"}}
	fresh := captchaq.Task{ID: "job-2", Method: "turnstile", Params: map[string]string{"sitekey": "0x4AAAAAAAnew", "pageurl": "https://new.example/c"}}
	recs, existed, err := s.Enqueue(t.Context(), []captchaq.Task{same, fresh}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if !existed[0] || existed[1] || recs[1].Fingerprint != fresh.Fingerprint() {
		t.Fatalf("Enqueue after migration: existed %v, new fingerprint %q", existed, recs[1].Fingerprint)
	}
	// A record stored before fingerprints is compared by its task.
	if err := recs[0].Conflict(same); err != nil {
		t.Fatalf("the same task conflicts with its version 1 record: %v", err)
	}
	var ce *captchaq.IDConflictError
	if err := recs[0].Conflict(other); !errors.As(err, &ce) || ce.Differs != "params.pageurl differs, params.sitekey differs" {
		t.Fatalf("another task under a version 1 id: %v", err)
	}
	if got, err := s.Get(t.Context(), "job-1"); err != nil || got.Status != captchaq.StatusQueued {
		t.Fatalf("job-1 after migration: %+v, %v", got, err)
	}
	// Version 7 keeps reservoirs' tokens.
	tok := captchaq.Result{ID: "r-1", Status: captchaq.StatusSolved, Token: "0.res", ExpiresAt: time.Now().Add(time.Minute)}
	if err := s.StockToken(t.Context(), "ts", tok); err != nil {
		t.Fatalf("StockToken after migration: %v", err)
	}
	if got, ok, err := s.TakeToken(t.Context(), "ts", time.Now()); err != nil || !ok || got.Token != tok.Token {
		t.Fatalf("TakeToken after migration: %+v, %v, %v", got, ok, err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var v int
	if err := db.QueryRow(`SELECT version FROM schema_version`).Scan(&v); err != nil || v != 7 {
		t.Fatalf("schema version after Open: %d, %v; want 7", v, err)
	}
}
