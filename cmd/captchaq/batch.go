package main

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/internal/syncio"
)

func init() {
	commands["batch"] = command{
		summary: "solve a file of task JSONL through the queue, one result line per task",
		run:     runBatch,
	}
}

// maxLineBytes bounds one task line: base64 images make long lines.
const maxLineBytes = 16 << 20

func runBatch(ctx context.Context, env *environment, args []string) error {
	fs := env.flagSet("batch")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: captchaq batch [FILE|-] [--out FILE] [--store PATH|memory] [--threads N | --plan NAME] [flags]")
		fmt.Fprintln(fs.Output(), "\nReads task JSONL (one task a line), solves every task through the queue and writes one result line per task.")
		fs.PrintDefaults()
	}
	out := fs.String("out", "", "write result JSONL to `FILE` (default: stdout)")
	qf := addQueueFlags(fs)
	progress := fs.Bool("progress", true, "show a progress bar when stderr is a terminal")
	order := fs.String("order", "input", "submit order: input, or longest-first (reads the whole input, then submits the slowest kinds first so the batch ends sooner; the queue does this by itself among tasks it accepts within a second of each other, and still serves lower priority numbers first)")
	if err := parseInterspersed(fs, args); err != nil {
		return err
	}
	if err := qf.providers.alone(); err != nil {
		return err
	}
	if fs.NArg() > 1 {
		return usageError(fmt.Errorf("one input file at most, got %d (%v)", fs.NArg(), fs.Args()))
	}
	if *order != "input" && *order != "longest-first" {
		return &exitError{code: 2, err: fmt.Errorf("--order %q: use input or longest-first", *order)}
	}
	qf.defaultStore = func(useSim bool) (string, error) { return batchStoreName(fs.Arg(0), *out, useSim) }
	in, total, closeIn, err := openInput(env, fs.Arg(0))
	if err != nil {
		return err
	}
	defer closeIn()
	w := env.stdout
	if *out != "" {
		f, err := os.Create(*out)
		if err != nil {
			return fmt.Errorf("--out: %w", err)
		}
		defer f.Close()
		w = f
	}
	// The reader, the stream and the queue's pause hook all report on
	// stderr; the progress bar keeps the real file to detect a terminal.
	term := env.stderr
	env = env.withStderr(syncio.NewWriter(env.stderr))
	rt, err := qf.open(ctx, env)
	if err != nil {
		return err
	}
	defer rt.close()
	bar := newProgress(term, total, *progress, rt.queue)
	defer bar.finish()
	bar.resumed(ctx, rt.store)
	return solveLines(ctx, env, rt, in, newResultWriter(w), bar, *order == "longest-first")
}

// solveLines is the batch itself: the input's lines, read as tasks,
// streamed through the queue (captchaq.StreamFunc), each result written
// as it comes, refusals included; then the summary and the exit code.
func solveLines(ctx context.Context, env *environment, rt *queueRuntime, in io.Reader, results *resultWriter, bar *progress, longestFirst bool) error {
	// A fatal account error stops the batch: its tasks would wait for a
	// Resume that does not come.
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	fatal := make(chan error, 1)
	go func() {
		select {
		case err := <-rt.fatal:
			fatal <- err
			stop()
		case <-runCtx.Done():
		}
	}()
	start := time.Now()
	parallel := 0 // captchaq.StreamFuncParallelDefault
	if longestFirst {
		parallel = 1 // the queue takes them in exactly the sorted order
	}
	lines, readErr := readLines(runCtx, in, longestFirst)
	var invalid, refused, repeated int
	var notes []lineNote // the messages about lines, written in line order at the end
	taskOf := func(l batchLine) (captchaq.Task, error) {
		if l.err == nil {
			bar.read(l.t) // for the ETA's model
		}
		return l.t, l.err
	}
	err := captchaq.StreamFunc(runCtx, rt.queue, lines, parallel, taskOf, func(l batchLine, r captchaq.Result, why error) {
		if why != nil {
			notes = append(notes, lineNote{l.n, fmt.Sprintf("line %d: %v", l.n, why)})
			var re *repeatedIDError
			switch {
			case errors.As(why, &re):
				repeated++ // its id's result line is the first line's
				bar.add(r)
				return
			case errors.Is(why, captchaq.ErrIDConflict):
				refused++
			default:
				invalid++
			}
			r.Error = fmt.Sprintf("line %d: %v", l.n, why)
			if r.ID == "" {
				r.ID = lineID(l.raw) // "" for a line with no id: its error names the line
			}
		}
		results.write(r)
		bar.add(r)
	})
	bar.finish()
	// The lines are checked concurrently; their messages go out in order.
	slices.SortFunc(notes, func(a, b lineNote) int { return cmp.Compare(a.n, b.n) })
	for _, n := range notes {
		fmt.Fprintln(env.stderr, n.msg)
	}
	select {
	case err := <-fatal:
		return rt.fatalStop(err)
	default:
	}
	switch {
	case ctx.Err() != nil:
		return &exitError{code: 130, err: errors.New("interrupted: every accepted task is kept in the store; run the same command again to resume")}
	case err != nil:
		return err
	}
	if err := errors.Join(readErr(), results.err()); err != nil {
		return err
	}
	solved, failed := results.counts()
	fmt.Fprintln(env.stderr, summary(solved, failed, invalid, refused, repeated, time.Since(start), rt.queue.Metrics()))
	if err := refusedLines(repeated, refused, rt.storePath); err != nil {
		return err
	}
	return batchOutcome(solved, failed, invalid+refused)
}

// refusedLines is the error for the lines a batch refused at its door,
// nil when there were none: a line that repeats an earlier line's id is
// bad input (exit 2); an id that names another task in the store (store
// is its file, or "") fails its line (exit 4). Repeats within the file
// never reach the store, so its ids are ones an earlier run left there,
// and a store of their own is a fix.
func refusedLines(repeated, refused int, store string) error {
	var msgs []string
	if repeated > 0 {
		msgs = append(msgs, fmt.Sprintf("%d lines refused: their ids are on earlier lines of the file (see above); an id names one task of a file", repeated))
	}
	if refused > 0 {
		msgs = append(msgs, fmt.Sprintf("%d tasks refused (%s): their ids name other tasks an earlier run left in %s; give them ids of their own, or use a store of their own (--store PATH)",
			refused, captchaq.CodeIDConflict, cmp.Or(store, "the store")))
	}
	switch {
	case repeated > 0:
		return usageError(errors.New(strings.Join(msgs, "; ")))
	case refused > 0:
		return &exitError{code: exitTasksFailed, err: errors.New(msgs[0])}
	}
	return nil
}

// lineNote is a message about line n of the input.
type lineNote struct {
	n   int
	msg string
}

// batchLine is one non-empty line of a batch's input, read as a task
// (readTask: captchaq.ParseTask, and a local image file for method post).
type batchLine struct {
	raw []byte
	n   int // its line number
	t   captchaq.Task
	err error
}

func (l batchLine) task() (captchaq.Task, error) { return l.t, l.err }

// readLines sends the non-empty lines of in, in order, until in ends or
// ctx does; with hold, it reads them all first and sends them longest
// first (captchaq.SortLongestFirst). readErr is the reading's error, once
// the channel is closed.
func readLines(ctx context.Context, in io.Reader, hold bool) (lines <-chan batchLine, readErr func() error) {
	out := make(chan batchLine, 256)
	var err error
	go func() {
		defer close(out)
		send := func(l batchLine) bool {
			select {
			case out <- l:
				return true
			case <-ctx.Done():
				return false
			}
		}
		var held []batchLine
		ids := fileIDs{}
		sc := bufio.NewScanner(in)
		sc.Buffer(make([]byte, 64<<10), maxLineBytes)
		n := 0
		for sc.Scan() {
			n++
			raw := sc.Bytes()
			if len(trimSpace(raw)) == 0 {
				continue
			}
			l := batchLine{raw: append([]byte(nil), raw...), n: n}
			l.t, l.err = readTask(l.raw)
			id := l.t.ID
			if l.err != nil && id == "" {
				id = lineID(l.raw)
			}
			if err := ids.check(id, n); err != nil {
				l.err = err
			}
			if hold {
				held = append(held, l)
			} else if !send(l) {
				return
			}
		}
		if e := sc.Err(); e != nil {
			err = fmt.Errorf("reading tasks (line %d): %w", n+1, e)
		}
		captchaq.SortLongestFirst(held, func(l batchLine) captchaq.Task { return l.t })
		for _, l := range held {
			if !send(l) {
				return
			}
		}
	}()
	return out, func() error { return err }
}

// batchOutcome is the error for a finished batch's exit code: bad input when
// no line held a task, some tasks failed when any got no answer.
func batchOutcome(solved, failed, invalid int) error {
	switch {
	case solved+failed == 0:
		return usageError(errors.New("the input holds no tasks"))
	case invalid == solved+failed:
		return usageError(fmt.Errorf("none of the %d lines is a valid task (see above)", invalid))
	case failed > 0:
		return &exitError{code: exitTasksFailed, err: fmt.Errorf("%d of %d tasks failed (see the result lines)", failed, solved+failed)}
	}
	return nil
}

// fatalStop is the error a command stops with on what rt.fatal sent: a
// provider that never answered (exit 1), or an account it refused (exit
// 3); it says whether the tasks accepted so far are kept for the rerun.
func (rt *queueRuntime) fatalStop(err error) error {
	kept := "; tasks accepted so far are kept in the store"
	if _, mem := rt.store.(*captchaq.MemoryStore); mem {
		kept = "; --store memory kept no task: the rerun starts afresh"
	}
	var ue *unreachableError
	if errors.As(err, &ue) {
		return &exitError{code: exitFailure, err: errors.New(err.Error() + kept)}
	}
	var ae *captchaq.AccountError
	if errors.As(err, &ae) {
		err = ae.Err
	}
	return &exitError{code: exitAccount, err: fmt.Errorf("stopped: the provider refused the account (%v); fix the key (%s or %s), plan or IP allow-list, then run the same command again%s", err, envKey, envKeyFile, kept)}
}

// summary is the closing line on stderr. Results the store already held
// took no work, so the rate counts only tasks finished in this run, and a
// rerun of a finished batch says where its results came from instead, and
// one after a stop how many unfinished tasks it took over.
func summary(solved, failed, invalid, refused, repeated int, elapsed time.Duration, m captchaq.Metrics) string {
	s := fmt.Sprintf("captchaq batch: %d solved, %d failed (%d invalid lines) of %d in %s",
		solved, failed, invalid, solved+failed, elapsed.Round(10*time.Millisecond))
	if refused > 0 {
		s += fmt.Sprintf("; %d refused: their ids name other tasks (%s)", refused, captchaq.CodeIDConflict)
	}
	if repeated > 0 {
		s += fmt.Sprintf("; %d lines refused: their ids are on earlier lines", repeated)
	}
	worked := int(m.Solved + m.Failed)
	if stored := solved + failed - invalid - refused - worked; stored > 0 {
		s += fmt.Sprintf("; %d from the store", stored)
	}
	if m.Resumed > 0 {
		s += fmt.Sprintf("; %d resumed from an earlier run, %d of them polled by the provider ids it stored (not submitted again)", m.Resumed, m.ResumedInFlight)
	}
	if m.Renewed > 0 {
		s += fmt.Sprintf("; %d solved again: their tokens had expired", m.Renewed)
	}
	if worked == 0 {
		return s
	}
	rate := "-"
	if elapsed > 0 {
		rate = fmt.Sprintf("%.1f", float64(worked)/elapsed.Minutes())
	}
	return s + fmt.Sprintf("; %d finished in this run at %s tasks/min; %.2f requests per solved task; threads %d",
		worked, rate, m.RequestsPerSolved, m.Threads) + providerSpend(m.Providers)
}

// providerSpend is the summary's part for a run on several providers
// (--providers): each one's tasks and spend.
func providerSpend(ps []captchaq.ProviderMetrics) string {
	if len(ps) == 0 || ps[0].Name == "" {
		return ""
	}
	var total float64
	parts := make([]string, len(ps))
	for i, p := range ps {
		parts[i] = fmt.Sprintf("%s %d solved, %d failed, spent %.4f", p.Name, p.Solved, p.Failed, p.Spend)
		if p.Solved > 0 && p.Spend > 0 {
			parts[i] += fmt.Sprintf(" (%.2f per 1,000)", p.CostPer1000)
		}
		if p.Moved > 0 {
			parts[i] += fmt.Sprintf(", %d moved away when it went down", p.Moved)
		}
		if !p.Healthy {
			parts[i] += " [out of routing]"
		}
		total += p.Spend
	}
	return fmt.Sprintf("; spend by provider: %s; total %.4f", strings.Join(parts, "; "), total)
}

// openInput opens the task source: a file, or stdin for "" and "-". total
// is the number of non-empty lines when it can be known up front (a
// regular file), else -1.
func openInput(env *environment, name string) (io.Reader, int, func(), error) {
	if name == "" || name == "-" {
		return env.stdin, -1, func() {}, nil
	}
	f, err := os.Open(name)
	if err != nil {
		return nil, 0, nil, usageError(fmt.Errorf("tasks file: %w", err))
	}
	total, err := countLines(f)
	if err != nil {
		f.Close()
		return nil, 0, nil, fmt.Errorf("tasks file %s: %w", name, err)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		f.Close()
		return nil, 0, nil, fmt.Errorf("tasks file %s: %w", name, err)
	}
	return f, total, func() { f.Close() }, nil
}

func countLines(r io.Reader) (int, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), maxLineBytes)
	n := 0
	for sc.Scan() {
		if len(trimSpace(sc.Bytes())) > 0 {
			n++
		}
	}
	return n, sc.Err()
}

func trimSpace(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t' || b[0] == '\r') {
		b = b[1:]
	}
	for len(b) > 0 && (b[len(b)-1] == ' ' || b[len(b)-1] == '\t' || b[len(b)-1] == '\r') {
		b = b[:len(b)-1]
	}
	return b
}

// resultWriter writes result lines from many goroutines, one whole line at a
// time, and counts outcomes.
type resultWriter struct {
	mu             sync.Mutex
	w              *bufio.Writer
	enc            *json.Encoder
	solved, failed int
	firstErr       error
}

func newResultWriter(w io.Writer) *resultWriter {
	bw := bufio.NewWriter(w)
	return &resultWriter{w: bw, enc: json.NewEncoder(bw)}
}

func (rw *resultWriter) write(r captchaq.Result) {
	rw.mu.Lock()
	defer rw.mu.Unlock()
	if r.Status == captchaq.StatusSolved {
		rw.solved++
	} else {
		rw.failed++
	}
	if err := rw.enc.Encode(r); err != nil && rw.firstErr == nil {
		rw.firstErr = err
	}
	// Each line reaches the file at once, so a crash loses no written line
	// and a reader (tail -f) sees results as they come.
	if err := rw.w.Flush(); err != nil && rw.firstErr == nil {
		rw.firstErr = err
	}
}

func (rw *resultWriter) counts() (solved, failed int) {
	rw.mu.Lock()
	defer rw.mu.Unlock()
	return rw.solved, rw.failed
}

func (rw *resultWriter) err() error {
	rw.mu.Lock()
	defer rw.mu.Unlock()
	if rw.firstErr != nil {
		return fmt.Errorf("writing results: %w", rw.firstErr)
	}
	return nil
}
