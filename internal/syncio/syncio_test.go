package syncio_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/captchaq/captchaq/internal/syncio"
)

// Writes from many goroutines come out whole, one after another, to the
// zero value's buffer and to a writer of NewWriter's (which is not safe
// for concurrent use itself: the race detector would tell).
func TestWritesComeOutWhole(t *testing.T) {
	var sb strings.Builder
	for name, w := range map[string]*syncio.Writer{"zero value": {}, "NewWriter": syncio.NewWriter(&sb)} {
		t.Run(name, func(t *testing.T) {
			var wg sync.WaitGroup
			for i := range 8 {
				wg.Go(func() {
					for range 100 {
						fmt.Fprintf(w, "%d%s\n", i, strings.Repeat("x", 200))
					}
				})
			}
			wg.Wait()
			out := w.String()
			if name == "NewWriter" {
				if out != "" {
					t.Errorf("String of a NewWriter's Writer = %q, want empty: it writes to its writer", out)
				}
				out = sb.String()
			}
			lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
			if len(lines) != 800 {
				t.Fatalf("%d lines, want 800", len(lines))
			}
			for _, l := range lines {
				if len(l) != 201 || strings.Count(l, "x") != 200 {
					t.Fatalf("line %q is not one write whole", l)
				}
			}
		})
	}
}
