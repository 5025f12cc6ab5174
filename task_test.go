package captchaq_test

import (
	"testing"

	"github.com/captchaq/captchaq"
)

func TestStatusFinal(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		s    captchaq.Status
		want bool
	}{
		{captchaq.StatusQueued, false},
		{captchaq.StatusInFlight, false},
		{captchaq.StatusSolved, true},
		{captchaq.StatusFailed, true},
		{"", false},
		{"canceled", false},
	} {
		if got := tc.s.Final(); got != tc.want {
			t.Errorf("Status(%q).Final() = %v, want %v", tc.s, got, tc.want)
		}
	}
}
