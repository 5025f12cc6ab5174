package storetest

import (
	"bytes"
	"context"
	"testing"

	"github.com/captchaq/captchaq"
)

func saveState(t *testing.T, ss captchaq.StateStore, name string, value []byte) {
	t.Helper()
	if err := ss.SaveState(context.Background(), name, value); err != nil {
		t.Fatalf("SaveState(%q): %v", name, err)
	}
}

// wantState fails the test unless name's value is want, byte for byte
// (nil: none stored).
func wantState(t *testing.T, ss captchaq.StateStore, name string, want []byte) {
	t.Helper()
	got, err := ss.LoadState(context.Background(), name)
	switch {
	case err != nil:
		t.Errorf("LoadState(%q): %v", name, err)
	case want == nil && got != nil:
		t.Errorf("LoadState(%q) = %q, want nil (none stored)", name, got)
	case want != nil && (got == nil || !bytes.Equal(got, want)):
		t.Errorf("LoadState(%q) = %q (nil: %v), want %q", name, got, got == nil, want)
	}
}

// testStateSavedAndReplaced: a value is loaded as saved, a second save
// replaces it, an unknown name has none, and each name keeps its own.
func testStateSavedAndReplaced(t *testing.T, s captchaq.Store) {
	ss := optional[captchaq.StateStore](t, s, "state")
	wantState(t, ss, "type_refusals", nil)
	saveState(t, ss, "type_refusals", []byte(`[{"method":"hcaptcha"}]`))
	saveState(t, ss, "other", []byte("first"))
	wantState(t, ss, "type_refusals", []byte(`[{"method":"hcaptcha"}]`))
	wantState(t, ss, "other", []byte("first"))

	saveState(t, ss, "type_refusals", []byte(`[]`))
	wantState(t, ss, "type_refusals", []byte(`[]`))
	wantState(t, ss, "other", []byte("first"))
	wantState(t, ss, "Type_Refusals", nil)
	wantState(t, ss, "type_refusal", nil)
	wantState(t, ss, "", nil)
}

// testStateBytesExact: a value is bytes, kept exactly: every byte value
// (NUL and invalid UTF-8 too), a large one, and an empty one, which is
// a value (not nil).
func testStateBytesExact(t *testing.T, s captchaq.Store) {
	ss := optional[captchaq.StateStore](t, s, "state")
	every := make([]byte, 512)
	for i := range every {
		every[i] = byte(255 - i%256)
	}
	large := []byte(incompressible(256<<10, 7))
	values := map[string][]byte{"every byte": every, "256 KiB": large, "empty": {}}
	for name, v := range values {
		saveState(t, ss, name, v)
	}
	for name, v := range values {
		wantState(t, ss, name, v)
	}
}
