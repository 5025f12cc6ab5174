package sqlite

import (
	"path/filepath"
	"testing"
)

// OpenTemp opens a Store at captchaq.db in a new temporary directory, or
// fails the test: the one way this package's tests, internal and
// external, open a store of their own (s.Path() names its file).
func OpenTemp(t *testing.T, c Config) *Store {
	t.Helper()
	s, err := Open(t.Context(), filepath.Join(t.TempDir(), "captchaq.db"), c)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
