package main

import (
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/captchaq/captchaq/internal/checks"
	"github.com/captchaq/captchaq/internal/tasktest"
	"github.com/captchaq/captchaq/sim"
)

// A task of a batch is validated once on its way to the provider: at the
// door (the stream's intake), not again when its line is read, queued or
// sent; a post task's image is decoded once.
func TestBatchValidatesEachTaskOnce(t *testing.T) {
	t.Parallel()
	_, base := startFastSim(t, sim.Config{Threads: 4})
	img := []byte("GIF89a checks " + t.Name())
	path := filepath.Join(t.TempDir(), "c.gif")
	if err := os.WriteFile(path, img, 0o600); err != nil {
		t.Fatal(err)
	}
	page := "https://shop.example/" + t.Name()
	lines := fmt.Sprintf(`{"id":"turnstile-1","method":"turnstile","params":{"sitekey":"0x4AAAAAAAB3x-test","pageurl":%q}}
{"id":"image-1","method":"post","params":{"file":%q}}
`, page, path)
	in := writeFile(t, "tasks.jsonl", lines)
	file := base64.StdEncoding.EncodeToString(img)
	turnstile, stopT := tasktest.Checks(func(p map[string]string) bool { return p["pageurl"] == page })
	defer stopT()
	image, stopI := tasktest.Checks(func(p map[string]string) bool { return p["file"] == file })
	defer stopI()

	r := runWith(t, "", keyEnv, append([]string{"batch", in, "--out", filepath.Join(t.TempDir(), "out.jsonl"),
		"--store", filepath.Join(t.TempDir(), "q.db"), "--api-url", base}, fastQueue...)...)
	if r.code != 0 {
		t.Fatalf("batch = %+v", r)
	}
	want := map[checks.Kind]int{checks.Queue: 1, checks.Provider: 1}
	if d := cmp.Diff(want, turnstile()); d != "" {
		t.Errorf("turnstile task's checks (-want +got):\n%s", d)
	}
	want[checks.Decode] = 1
	if d := cmp.Diff(want, image()); d != "" {
		t.Errorf("post task's checks (-want +got):\n%s", d)
	}
}

// solve validates its one task once, at its door, and hands the queue the
// checked task (Queue.SubmitValid) rather than checking it again.
func TestSolveValidatesTheTaskOnce(t *testing.T) {
	t.Parallel()
	_, base := startFastSim(t, sim.Config{Threads: 1})
	page := "https://shop.example/" + t.Name()
	tally, stop := tasktest.Checks(func(p map[string]string) bool { return p["pageurl"] == page })
	defer stop()
	r := runWith(t, "", keyEnv, append([]string{"solve", "--api-url", base, "--method", "turnstile",
		"--param", "sitekey=0x4AAAAAAAB3x-test", "--param", "pageurl=" + page}, fastQueue...)...)
	if r.code != 0 {
		t.Fatalf("solve = %+v", r)
	}
	if d := cmp.Diff(map[checks.Kind]int{checks.Queue: 1, checks.Provider: 1}, tally()); d != "" {
		t.Errorf("the task's checks (-want +got):\n%s", d)
	}
}
