package sim

import (
	"bufio"
	"bytes"
	"cmp"
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

// openJournalLocked reads the state file, takes back its tasks that are
// not forgotten yet (each holds its thread until it is due, and its
// fingerprint counts, so the same task submitted again is a duplicate),
// writes the file again with only those, and keeps it open for the next
// accepts. A missing file is an empty one.
func (s *Server) openJournalLocked(path string) error {
	now := s.cfg.Now()
	var kept []journalEntry
	data, err := os.ReadFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return fmt.Errorf("sim: StateFile: %w", err)
	default:
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
				return fmt.Errorf("sim: StateFile %s line %d: %v; it is not a simulator's state file (move it away to start afresh)", path, n, err)
			}
			if !e.DueAt.Add(s.cfg.ResultTTL).After(now) {
				continue // forgotten by now, as it would have been
			}
			kept = append(kept, e)
			s.restoreLocked(e, now)
		}
	}
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("sim: StateFile: %w", err)
	}
	w := bufio.NewWriter(f)
	enc := json.NewEncoder(w)
	for _, e := range kept {
		if err := enc.Encode(e); err != nil {
			f.Close()
			return fmt.Errorf("sim: StateFile: %w", err)
		}
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return fmt.Errorf("sim: StateFile: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("sim: StateFile: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("sim: StateFile: %w", err)
	}
	f, err = os.OpenFile(filepath.Clean(path), os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("sim: StateFile: %w", err)
	}
	s.journal = &journal{f: f}
	return nil
}

// restoreLocked takes back one task of the state file.
func (s *Server) restoreLocked(e journalEntry, now time.Time) {
	t := &task{
		id:         e.ID,
		kind:       e.Kind,
		unsolvable: e.Unsolvable,
		acceptedAt: e.AcceptedAt,
		pingback:   e.Pingback,
		pbJSON:     e.PingbackJSON,
		hint:       answerHint{text: e.Hint.Text, charset: e.Hint.Charset, min: e.Hint.Min, max: e.Hint.Max},
		salt:       cmp.Or(e.Salt, s.cfg.Seed),
	}
	s.tasks[t.id] = t
	s.nextID = max(s.nextID, t.id+1)
	s.threadTakenLocked(now)
	if fp, err := hex.DecodeString(e.Fingerprint); err == nil && len(fp) == 16 {
		s.st.submissions.add([16]byte(fp), e.AcceptedAt)
	}
	// An overdue solve is done at the timer's first run, at its due time.
	s.scheduleLocked(event{at: e.DueAt, id: t.id, kind: eventSolve})
}

// recordLocked appends an accepted task to the state file, before its
// submit is answered. A failed write keeps the task in memory only; the
// first such error is returned by Close.
func (s *Server) recordLocked(t *task, due time.Time, fp [16]byte) {
	if s.journal == nil || s.journal.err != nil {
		return
	}
	e := journalEntry{ID: t.id, Kind: t.kind, Fingerprint: hex.EncodeToString(fp[:]), AcceptedAt: t.acceptedAt,
		DueAt: due, Unsolvable: t.unsolvable, Pingback: t.pingback, PingbackJSON: t.pbJSON, Salt: t.salt,
		Hint: journalHint{Text: t.hint.text, Charset: t.hint.charset, Min: t.hint.min, Max: t.hint.max}}
	line, err := json.Marshal(e)
	if err == nil {
		_, err = s.journal.f.Write(append(line, '\n'))
	}
	if err != nil {
		s.journal.err = fmt.Errorf("sim: StateFile: %w; tasks accepted since are kept in memory only", err)
	}
}

// closeJournal closes the state file and returns the first write error.
func (s *Server) closeJournal() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.journal == nil {
		return nil
	}
	err := s.journal.err
	if cerr := s.journal.f.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("sim: StateFile: %w", cerr)
	}
	s.journal = nil
	return err
}
