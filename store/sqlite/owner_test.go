package sqlite_test

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/captchaq/captchaq/store/sqlite"
)

func TestStoreRefusesAnotherOwner(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "q.db")
	open := func(owner string) error {
		s, err := sqlite.Open(t.Context(), path, sqlite.Config{Owner: owner})
		if err == nil {
			s.Close()
		}
		return err
	}
	if err := open("gateway g1"); err != nil {
		t.Fatal(err)
	}
	for _, other := range []string{"serve", "gateway g2", "batch"} {
		err := open(other)
		if !errors.Is(err, sqlite.ErrOtherOwner) || !strings.Contains(err.Error(), "holds the tasks of gateway g1, not of "+other) ||
			!strings.Contains(err.Error(), "--store PATH") {
			t.Errorf("Open as %q: %v", other, err)
		}
	}
	for _, same := range []string{"gateway g1", ""} {
		if err := open(same); err != nil {
			t.Errorf("Open as %q: %v", same, err)
		}
	}
	s, err := sqlite.Open(t.Context(), path, sqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if o, err := s.Owner(t.Context()); err != nil || o != "gateway g1" {
		t.Fatalf("Owner = %q, %v", o, err)
	}
}
