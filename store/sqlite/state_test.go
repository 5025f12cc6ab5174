package sqlite_test

import (
	"path/filepath"
	"testing"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/store/sqlite"
)

var _ captchaq.StateStore = (*sqlite.Store)(nil)

// A value SaveState stored is LoadState's after the store is opened
// again; a later SaveState replaces it; a name never saved is nil.
func TestStateSurvivesReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "q.db")
	ctx := t.Context()
	s, err := sqlite.Open(ctx, path, sqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{`[{"method":"hcaptcha"}]`, `[{"method":"turnstile"}]`} {
		if err := s.SaveState(ctx, "type_refusals", []byte(v)); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = sqlite.Open(ctx, path, sqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if v, err := s.LoadState(ctx, "type_refusals"); err != nil || string(v) != `[{"method":"turnstile"}]` {
		t.Fatalf("LoadState = %q, %v; want the last value saved", v, err)
	}
	if v, err := s.LoadState(ctx, "other"); err != nil || v != nil {
		t.Fatalf("LoadState of a name never saved = %q, %v; want nil", v, err)
	}
}
