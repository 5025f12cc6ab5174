package sim

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/captchaq/captchaq/provider"
)

// journal keeps the accepted tasks in Config.StateFile, one JSON line per
// accepted submit, written before the submit is answered: a simulator
// started again on the file after its process died (kill -9 included)
// knows every id an earlier one gave out, and solves each when it was due.
type journal struct {
	f   *os.File
	err error // the first write error, returned by Close
}

// journalEntry is one accepted task on file.
type journalEntry struct {
	ID           uint64        `json:"id"`
	Kind         provider.Kind `json:"kind"`
	Fingerprint  string        `json:"fingerprint"`
	AcceptedAt   time.Time     `json:"accepted_at"`
	DueAt        time.Time     `json:"due_at"`
	Unsolvable   bool          `json:"unsolvable,omitempty"`
	Pingback     string        `json:"pingback,omitempty"`
	PingbackJSON bool          `json:"pingback_json,omitempty"`
	Hint         journalHint   `json:"hint,omitzero"`
	// Salt seeds the answer (task.salt); a line written before salts
	// has none, and its answer is seeded by Config.Seed as it was then.
	Salt uint64 `json:"salt,omitempty"`
}

type journalHint struct {
	Text    string `json:"text,omitempty"`
	Charset int8   `json:"charset,omitempty"`
	Min     int8   `json:"min,omitempty"`
	Max     int8   `json:"max,omitempty"`
}

// openJournal reads the state file at path, keeps its tasks that are not
// forgotten at now (ttl after they were due), writes the file again with
// only those, and opens it for the next accepts. A missing file is an
// empty one. The Server takes the kept tasks back (taskTable.restore):
// each holds its thread until it is due, and its fingerprint counts, so
// the same task submitted again is a duplicate.
func openJournal(path string, now time.Time, ttl time.Duration) ([]journalEntry, *journal, error) {
	kept, err := readJournal(path, now, ttl)
	if err != nil {
		return nil, nil, err
	}
	if err := rewriteJournal(path, kept); err != nil {
		return nil, nil, fmt.Errorf("sim: StateFile: %w", err)
	}
	f, err := os.OpenFile(filepath.Clean(path), os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return nil, nil, fmt.Errorf("sim: StateFile: %w", err)
	}
	return kept, &journal{f: f}, nil
}

// readJournal reads the entries of the state file not forgotten at now.
func readJournal(path string, now time.Time, ttl time.Duration) ([]journalEntry, error) {
	var kept []journalEntry
	data, err := os.ReadFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("sim: StateFile: %w", err)
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for n := 1; sc.Scan(); n++ {
		var e journalEntry
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			// A line cut short by a kill mid-write can only be the last
			// one, with no newline, and its submit was never answered:
			// drop it.
			line := sc.Bytes()
			if bytes.HasPrefix(line, []byte(`{"id":`)) && !bytes.HasSuffix(data, []byte("\n")) && !sc.Scan() {
				break
			}
			return nil, fmt.Errorf("sim: StateFile %s line %d: %v; it is not a simulator's state file (move it away to start afresh)", path, n, err)
		}
		if !e.DueAt.Add(ttl).After(now) {
			continue // forgotten by now, as it would have been
		}
		kept = append(kept, e)
	}
	return kept, nil
}

// rewriteJournal replaces the state file with one of entries.
func rewriteJournal(path string, entries []journalEntry) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	enc := json.NewEncoder(w)
	for _, e := range entries {
		if err := enc.Encode(e); err != nil {
			f.Close()
			return err
		}
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// record appends an accepted task to the state file, before its submit is
// answered. A failed write keeps the task in memory only; the first such
// error is returned by close. A nil journal records nothing.
func (j *journal) record(t *task, due time.Time, fp [16]byte) {
	if j == nil || j.err != nil {
		return
	}
	e := journalEntry{ID: t.id, Kind: t.kind, Fingerprint: hex.EncodeToString(fp[:]), AcceptedAt: t.acceptedAt,
		DueAt: due, Unsolvable: t.unsolvable, Pingback: t.pingback, PingbackJSON: t.pbJSON, Salt: t.salt,
		Hint: journalHint{Text: t.hint.text, Charset: t.hint.charset, Min: t.hint.min, Max: t.hint.max}}
	line, err := json.Marshal(e)
	if err == nil {
		_, err = j.f.Write(append(line, '\n'))
	}
	if err != nil {
		j.err = fmt.Errorf("sim: StateFile: %w; tasks accepted since are kept in memory only", err)
	}
}

// close closes the state file and returns the first write error.
func (j *journal) close() error {
	if j == nil {
		return nil
	}
	err := j.err
	if cerr := j.f.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("sim: StateFile: %w", cerr)
	}
	return err
}
