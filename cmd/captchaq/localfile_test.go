package main

import (
	"encoding/base64"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/provider"
)

// The command line reads a post task's local file once, at intake, and
// sends on the bytes; devices and oversized files are refused.
func TestIntakeReadsLocalImageOnce(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	img := filepath.Join(dir, "c.png")
	if err := os.WriteFile(img, []byte("GIF89a"), 0o600); err != nil {
		t.Fatal(err)
	}
	task, err := parseTaskLine([]byte(`{"id":"a","method":"post","params":{"file":"` + img + `"}}`))
	if err != nil {
		t.Fatal(err)
	}
	if got := task.Params["file"]; got != base64.StdEncoding.EncodeToString([]byte("GIF89a")) {
		t.Fatalf("file param = %q, want the bytes", got)
	}
	// The file may change or go: the task holds its bytes.
	os.Remove(img)
	if err := task.ProviderTask().Validate(); err != nil {
		t.Errorf("validate: %v", err)
	}
	big := filepath.Join(dir, "big.png")
	if err := os.WriteFile(big, make([]byte, provider.MaxImageBytes+1), 0o600); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]string{"/dev/zero": "not a regular file", big: "larger than 614400 bytes", img: "no such file"} {
		_, err := parseTaskLine([]byte(`{"id":"a","method":"post","params":{"file":"` + path + `"}}`))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", path, err, want)
		}
	}
}

// batch and enqueue refuse an unreadable image alike: a *TaskError with
// INVALID_TASK naming params.file.
func TestUnreadableImageRefusedAsInvalidTask(t *testing.T) {
	t.Parallel()
	missing := filepath.Join(t.TempDir(), "gone.png")
	line := []byte(`{"id":"a","method":"post","params":{"file":"` + missing + `"}}`)
	_, readErr := readTask(line)
	_, enqueueErr := parseTaskLine(line)
	for _, err := range []error{readErr, enqueueErr} {
		var te *captchaq.TaskError
		if !errors.As(err, &te) || te.Code != captchaq.CodeInvalidTask || te.ID != "a" || !strings.HasPrefix(te.Msg, "params.file: cannot read the image: ") {
			t.Errorf("%v: want a *TaskError %s for a naming params.file", err, captchaq.CodeInvalidTask)
		}
	}
}
