package postgres_test

import (
	"testing"

	"github.com/captchaq/captchaq/internal/pgtest"
	"github.com/captchaq/captchaq/store/postgres"
)

// A database of schema version 8, before queue_state, is brought to
// version 9 at Open, and a value saved then outlives the store.
func TestStateMigratedFromVersion8AndKept(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t)
	open(t, url, postgres.Config{}).Close()
	exec(t, url, `DROP TABLE queue_state; UPDATE schema_version SET version = 8`)
	s := open(t, url, postgres.Config{})
	var v int
	if err := s.Pool().QueryRow(t.Context(), `SELECT version FROM schema_version`).Scan(&v); err != nil || v != 9 {
		t.Fatalf("schema version after Open: %d, %v; want 9", v, err)
	}
	if err := s.SaveState(t.Context(), "type_refusals", []byte(`[{"method":"hcaptcha"}]`)); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s = open(t, url, postgres.Config{})
	if b, err := s.LoadState(t.Context(), "type_refusals"); err != nil || string(b) != `[{"method":"hcaptcha"}]` {
		t.Fatalf("LoadState after the restart: %q, %v", b, err)
	}
	if err := s.SaveState(t.Context(), "a\x00b", nil); err == nil {
		t.Error("SaveState of a name with a NUL byte succeeded, want an error naming it")
	}
}
