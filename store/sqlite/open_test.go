package sqlite_test

import (
	"bytes"
	"crypto/rand"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/store/sqlite"
)

func randomBytes(t *testing.T, n int) []byte {
	t.Helper()
	b := make([]byte, n)
	if _, err := io.ReadFull(rand.Reader, b); err != nil {
		t.Fatal(err)
	}
	return b
}

// writeForeignDB makes an SQLite database of some other program.
func writeForeignDB(t *testing.T, path string) {
	t.Helper()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`CREATE TABLE users (name TEXT); INSERT INTO users VALUES ('ann')`); err != nil {
		t.Fatal(err)
	}
}

// writeStoreWithVersion makes a captchaq store whose schema version is v.
func writeStoreWithVersion(t *testing.T, path string, v int) {
	t.Helper()
	s, err := sqlite.Open(t.Context(), path, sqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`UPDATE schema_version SET version = ?; PRAGMA wal_checkpoint(TRUNCATE)`, v); err != nil {
		t.Fatal(err)
	}
}

func TestOpenRefusesBadFiles(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		make func(t *testing.T, path string) // leaves path in the bad state
		want string                          // in the error, after "store PATH"
	}{
		{"random bytes", func(t *testing.T, path string) {
			b := randomBytes(t, 8192)
			b[0] = 'x' // not by chance an SQLite header
			must(t, os.WriteFile(path, b, 0o600))
		}, "is not an SQLite database"},
		{"text file", func(t *testing.T, path string) {
			must(t, os.WriteFile(path, []byte(`{"id":"checkout-1","method":"turnstile"}`+"\n"), 0o600))
		}, `is not an SQLite database (it starts with "{\"id\":\"checkout-"); captchaq leaves it as it is: move it aside or choose another path`},
		{"short file", func(t *testing.T, path string) {
			must(t, os.WriteFile(path, []byte("SQLite"), 0o600))
		}, `is not an SQLite database (it starts with "SQLite")`},
		{"SQLite header then garbage", func(t *testing.T, path string) {
			must(t, os.WriteFile(path, append([]byte("SQLite format 3\x00"), randomBytes(t, 8176)...), 0o600))
		}, "is not a usable SQLite database"},
		{"another program's database", writeForeignDB, "is an SQLite database but not a captchaq store"},
		{"newer schema", func(t *testing.T, path string) { writeStoreWithVersion(t, path, 99) },
			"has schema version 99, newer than this captchaq knows (7): upgrade captchaq"},
		{"directory", func(t *testing.T, path string) { must(t, os.Mkdir(path, 0o700)) },
			"is a directory: give the path of a file in it"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(t.TempDir(), "captchaq.db")
			tc.make(t, path)
			before := snapshot(t, path)

			s, err := sqlite.Open(t.Context(), path, sqlite.Config{})
			if err == nil {
				s.Close()
				t.Fatal("Open succeeded")
			}
			if prefix := "store " + path + " "; !strings.HasPrefix(err.Error(), prefix) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Open error:\n%v\nwant it to start with %q and contain %q", err, prefix, tc.want)
			}
			if after := snapshot(t, path); !bytes.Equal(before, after) {
				t.Errorf("Open changed the file: %d bytes before, %d after", len(before), len(after))
			}
			// A refused Open releases its lock.
			if _, err := os.Stat(path + ".lock"); err == nil {
				_, err := sqlite.Open(t.Context(), path, sqlite.Config{})
				if errors.Is(err, sqlite.ErrInUse) {
					t.Errorf("second Open after a refused one: %v", err)
				}
			}
		})
	}
}

// snapshot returns the file's bytes, or nil for a directory.
func snapshot(t *testing.T, path string) []byte {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.IsDir() {
		return nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestOpenMissingDirectory(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "no", "such", "captchaq.db")
	_, err := sqlite.Open(t.Context(), path, sqlite.Config{})
	if err == nil || !strings.HasPrefix(err.Error(), "store "+path+": ") || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Open in a missing directory: %v; want an error naming %s and wrapping ErrNotExist", err, path)
	}
}

// TestOpenWithoutPermission opens a file the process may not write. Root
// may write anything, so as root the Open runs in a child process as
// nobody (uid 65534).
func TestOpenWithoutPermission(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "captchaq.db")
	writeStoreWithVersion(t, path, 1)
	must(t, os.Chmod(path, 0o444))
	before := snapshot(t, path)
	want := fmt.Sprintf("store %s cannot be opened for reading and writing: open %s: permission denied", path, path)

	if os.Geteuid() != 0 {
		_, err := sqlite.Open(t.Context(), path, sqlite.Config{})
		if err == nil || err.Error() != want {
			t.Errorf("Open of a read-only file: %v\nwant: %s", err, want)
		}
	} else {
		// nobody needs to reach the test binary and the store's directory.
		bin := filepath.Join(dir, "store.test")
		copyFile(t, os.Args[0], bin, 0o755)
		// t.TempDir is TMP/TestName…/NNN, both made 0700.
		must(t, os.Chmod(dir, 0o755))
		must(t, os.Chmod(filepath.Dir(dir), 0o755))
		must(t, os.Chmod(path+".lock", 0o666))
		cmd := exec.Command(bin, "-test.run=^TestChildProcess$", "-test.count=1")
		cmd.Env = append(os.Environ(), childModeEnv+"=open", childPathEnv+"="+path)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		out, err := cmd.Output()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 3 {
			t.Errorf("child as nobody: %v (output %q), want exit status 3", err, out)
		}
		if got := strings.TrimSpace(string(out)); got != "error: "+want {
			t.Errorf("child as nobody said\n%s\nwant\nerror: %s", got, want)
		}
	}
	if after := snapshot(t, path); !bytes.Equal(before, after) {
		t.Error("a refused Open changed the file")
	}
}

func copyFile(t *testing.T, from, to string, mode os.FileMode) {
	t.Helper()
	b, err := os.ReadFile(from)
	must(t, err)
	must(t, os.WriteFile(to, b, mode))
}

func TestOpenEmptyFileMakesAStore(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "captchaq.db")
	must(t, os.WriteFile(path, nil, 0o600))
	s, err := sqlite.Open(t.Context(), path, sqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, _, err := s.Enqueue(t.Context(), []captchaq.Task{{ID: "a", Method: "turnstile"}}, time.Now()); err != nil {
		t.Fatal(err)
	}
}

func TestReopenKeepsEverything(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "captchaq.db")
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	s, err := sqlite.Open(t.Context(), path, sqlite.Config{})
	must(t, err)
	recs, _, err := s.Enqueue(t.Context(), []captchaq.Task{{ID: "a", Method: "turnstile"}, {ID: "b", Method: "turnstile"}}, now)
	must(t, err)
	must(t, s.Checkpoint(t.Context(), "b", "42", 1, now))
	must(t, s.Close())

	s, err = sqlite.Open(t.Context(), path, sqlite.Config{})
	must(t, err)
	defer s.Close()
	var got []string
	must(t, s.Pending(t.Context(), func(r captchaq.Record) error {
		got = append(got, fmt.Sprintf("%s/%s/%s/%d", r.Task.ID, r.Status, r.CaptchaID, r.Seq))
		return nil
	}))
	want := []string{fmt.Sprintf("a/queued//%d", recs[0].Seq), fmt.Sprintf("b/inflight/42/%d", recs[1].Seq)}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("Pending after reopen = %v, want %v", got, want)
	}
	// New tasks continue the sequence.
	more, _, err := s.Enqueue(t.Context(), []captchaq.Task{{ID: "c", Method: "turnstile"}}, now)
	must(t, err)
	if more[0].Seq <= recs[1].Seq {
		t.Errorf("Seq after reopen = %d, want above %d", more[0].Seq, recs[1].Seq)
	}
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		cfg  sqlite.Config
		want string
	}{
		{sqlite.Config{Synchronous: "OFF"}, `sqlite: Config.Synchronous "OFF" is not valid: use SynchronousNormal or SynchronousFull`},
		{sqlite.Config{BusyTimeout: -time.Second}, "sqlite: Config.BusyTimeout -1s is negative: use 0 for the default (5s) or a positive duration"},
		{sqlite.Config{Retention: -time.Hour}, "sqlite: Config.Retention -1h0m0s is negative: use RetentionOff to keep results, 0 for the default (168h0m0s) or a positive duration"},
		{sqlite.Config{PruneInterval: -time.Hour}, "sqlite: Config.PruneInterval -1h0m0s is negative: use 0 for the default (1h0m0s) or a positive duration"},
		{sqlite.Config{MaxBatch: -1}, "sqlite: Config.MaxBatch -1 is negative: use 0 for the default (512) or a positive number"},
	}
	for _, tc := range tests {
		path := filepath.Join(t.TempDir(), "captchaq.db")
		_, err := sqlite.Open(t.Context(), path, tc.cfg)
		if err == nil || err.Error() != tc.want {
			t.Errorf("Open(%+v): %v\nwant: %s", tc.cfg, err, tc.want)
		}
		if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("Open with a bad Config created %s", path)
		}
	}
	// Every problem at once, one a line.
	all := sqlite.Config{Synchronous: "OFF", BusyTimeout: -time.Second, Retention: -time.Hour, PruneInterval: -time.Hour, MaxBatch: -1}
	want := make([]string, len(tests))
	for i, tc := range tests {
		want[i] = tc.want
	}
	if _, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "captchaq.db"), all); err == nil || err.Error() != strings.Join(want, "\n") {
		t.Errorf("Open(%+v): %v\nwant: %s", all, err, strings.Join(want, "\n"))
	}
	if _, err := sqlite.Open(t.Context(), "", sqlite.Config{}); err == nil || !strings.Contains(err.Error(), "store path is empty") {
		t.Errorf("Open(\"\"): %v", err)
	}
}

func TestDefaultPath(t *testing.T) {
	// Not parallel: it sets environment variables.
	data := filepath.Join(t.TempDir(), "data")
	home := filepath.Join(t.TempDir(), "home")
	tests := []struct {
		xdg, home string
		want      string
	}{
		{data, home, filepath.Join(data, "captchaq", "captchaq.db")},
		{"", home, filepath.Join(home, ".local", "share", "captchaq", "captchaq.db")},
		{"relative/dir", home, filepath.Join(home, ".local", "share", "captchaq", "captchaq.db")},
	}
	for _, tc := range tests {
		t.Setenv("XDG_DATA_HOME", tc.xdg)
		t.Setenv("HOME", tc.home)
		got, err := sqlite.DefaultPath()
		if err != nil || got != tc.want {
			t.Errorf("DefaultPath with XDG_DATA_HOME=%q HOME=%q = %q, %v; want %q", tc.xdg, tc.home, got, err, tc.want)
			continue
		}
		fi, err := os.Stat(filepath.Dir(got))
		if err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o700 {
			t.Errorf("directory of %s: %v, %v; want a directory with mode 0700", got, fi, err)
		}
	}
}

// TestSchemaReadsPlainly reads the file the way the sqlite3 shell would,
// while the store is open, through the documented columns.
func TestSchemaReadsPlainly(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "captchaq.db")
	s, err := sqlite.Open(t.Context(), path, sqlite.Config{Retention: sqlite.RetentionOff})
	must(t, err)
	defer s.Close()
	now := time.Date(2026, 3, 1, 12, 0, 0, 5e6, time.FixedZone("UTC+1", 3600))
	_, _, err = s.Enqueue(t.Context(), []captchaq.Task{
		{ID: "a", Method: "turnstile", Params: map[string]string{"sitekey": "0x4AAA"}, Priority: 2, Tenant: "shop"},
		{ID: "b", Method: "base64", Params: map[string]string{"body": "aGk="}},
	}, now)
	must(t, err)
	must(t, s.Checkpoint(t.Context(), "b", "7311", 1, now))
	must(t, s.Finish(t.Context(), captchaq.Result{ID: "a", Status: captchaq.StatusFailed, Method: "turnstile",
		Error: "provider: bad sitekey", ErrorCode: "ERROR_WRONG_GOOGLEKEY", Attempts: 1, FinishedAt: now.Add(time.Second)}))

	db, err := sql.Open("sqlite", "file:"+path+"?mode=ro")
	must(t, err)
	defer db.Close()
	rows, err := db.Query(`SELECT id, status, seq, priority, tenant, method, json_extract(params, '$.sitekey'),
		captcha_id, attempts, accepted_at, coalesce(result_error_code, ''), coalesce(finished_at, '')
		FROM tasks ORDER BY seq`)
	must(t, err)
	defer rows.Close()
	var got []string
	for rows.Next() {
		var id, status, tenant, method, captchaID, accepted, code, finished string
		var sitekey sql.NullString
		var seq, priority, attempts int
		must(t, rows.Scan(&id, &status, &seq, &priority, &tenant, &method, &sitekey, &captchaID, &attempts, &accepted, &code, &finished))
		got = append(got, fmt.Sprintf("%s|%s|%d|%d|%s|%s|%s|%s|%d|%s|%s|%s",
			id, status, seq, priority, tenant, method, sitekey.String, captchaID, attempts, accepted, code, finished))
	}
	must(t, rows.Err())
	want := []string{
		"a|failed|1|2|shop|turnstile|0x4AAA||1|2026-03-01T11:00:00.005000000Z|ERROR_WRONG_GOOGLEKEY|2026-03-01T11:00:01.005000000Z",
		"b|inflight|2|0||base64||7311|1|2026-03-01T11:00:00.005000000Z||",
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("rows:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
