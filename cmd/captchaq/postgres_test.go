package main

import (
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/captchaq/captchaq/internal/pgtest"
	"github.com/captchaq/captchaq/internal/testbound"
	"github.com/captchaq/captchaq/sim"
)

// pgPassword is put in the --store URLs of these tests (the local server
// trusts its clients, so it is never asked for): no output may show it.
const pgPassword = "pg-Secret-Pass-314"

// pgStoreURL is a new database's URL with pgPassword in it. A test that
// uses the broker too calls it first: every test takes the PostgreSQL
// test lock before the broker's, or one holding the broker's exclusively
// (TestFrontBrokerRestarted) and another holding PostgreSQL's
// exclusively (TestFrontPostgresRestarted, in another test process on
// the machine) each wait for the other until their locks' timeouts.
func pgStoreURL(t *testing.T) string {
	t.Helper()
	u, err := url.Parse(pgtest.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword(u.User.Username(), pgPassword)
	return u.String()
}

func noPassword(t *testing.T, where, text string) {
	t.Helper()
	if strings.Contains(text, pgPassword) {
		t.Errorf("the database password is in %s:\n%s", where, text)
	}
}

// A batch keeps its tasks in PostgreSQL as in SQLite: a rerun on the same
// database solves nothing again and writes the same results.
func TestBatchOnPostgres(t *testing.T) {
	t.Parallel()
	s, base := startFastSim(t, sim.Config{Threads: 10})
	db := pgStoreURL(t)
	tasks := turnstileTasks("pg", 30)
	in := writeFile(t, "tasks.jsonl", jsonl(t, tasks))
	outPath := filepath.Join(t.TempDir(), "out.jsonl")
	args := append([]string{"batch", in, "--out", outPath, "--store", db, "--api-url", base, "--threads", "10"}, fastQueue...)

	r := runWith(t, "", keyEnv, args...)
	noPassword(t, "batch's output", r.stdout+r.stderr)
	if r.code != 0 {
		t.Fatalf("batch = %+v", r)
	}
	got := readAllSolved(t, outPath, tasks)
	st := s.Stats()
	if st.Accepted != int64(len(tasks)) {
		t.Errorf("sim accepted %d, want %d", st.Accepted, len(tasks))
	}
	r2 := runWith(t, "", keyEnv, args...)
	noPassword(t, "the rerun's output", r2.stdout+r2.stderr)
	if r2.code != 0 {
		t.Fatalf("rerun = %+v", r2)
	}
	if diff := cmp.Diff(tokens(got), tokens(readAllSolved(t, outPath, tasks))); diff != "" {
		t.Errorf("rerun tokens (-first +rerun):\n%s", diff)
	}
	if st2 := s.Stats(); st2.Calls.Submit != st.Calls.Submit {
		t.Errorf("rerun reached the provider: submit calls %d→%d", st.Calls.Submit, st2.Calls.Submit)
	}
	if !strings.Contains(r2.stderr, "30 from the store") {
		t.Errorf("rerun summary should say the results came from the store: %q", r2.stderr)
	}
}

// servingRE matches serve's start line: its address, then its store.
var servingRE = regexp.MustCompile(`msg=serving addr=(127\.0\.0\.1:\d+) .*store=(\S+)`)

// serve (local mode) and serve --amqp run on a PostgreSQL database named
// with a password: they answer in.php/res.php, log the database without
// the password, and a gateway restarted on the database answers the tasks
// the first one took.
func TestServeOnPostgres(t *testing.T) {
	t.Parallel()
	const clientKey, providerKey = "pg-client-key-1", "pg-provider-key"
	clients := writeFile(t, "clients.json", `[{"name":"qa","key":"`+clientKey+`","admin":true}]`)
	submit := func(base string, i int) string {
		t.Helper()
		resp, err := http.PostForm(base+"/in.php", url.Values{"key": {clientKey}, "method": {"turnstile"},
			"sitekey": {"0x4AAAAAAA"}, "pageurl": {fmt.Sprintf("https://shop.example/pg/%d", i)}})
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		id, ok := strings.CutPrefix(string(body), "OK|")
		if !ok {
			t.Fatalf("in.php: %q", body)
		}
		return id
	}
	answer := func(base, id string) string {
		t.Helper()
		var body []byte
		testbound.Until(t, "res.php "+id+" to answer", func() bool {
			resp, err := http.Get(base + "/res.php?" + url.Values{"key": {clientKey}, "action": {"get"}, "id": {id}}.Encode())
			if err != nil {
				t.Fatal(err)
			}
			body, _ = io.ReadAll(resp.Body)
			resp.Body.Close()
			return string(body) != "CAPCHA_NOT_READY"
		})
		return string(body)
	}

	t.Run("local", func(t *testing.T) {
		_, simURL := startFastSim(t, sim.Config{Threads: 5})
		db := pgStoreURL(t)
		p, m := startProcess(t, captchaqBinary(t), []string{"CAPTCHAAI_KEY=" + providerKey}, servingRE,
			"serve", "--store", db, "--clients", clients, "--listen", "127.0.0.1:0", "--api-url", simURL, "--poll-interval", "10ms")
		if want := strings.Split(strings.Replace(db, ":"+pgPassword, "", 1), "?")[0]; m[2] != want {
			t.Errorf("serve logs store=%s, want %s", m[2], want)
		}
		base := "http://" + m[1]
		id := submit(base, 0)
		if ans := answer(base, id); !strings.HasPrefix(ans, "OK|") {
			t.Errorf("res.php %s: %q", id, ans)
		}
		p.stop(t)
		noPassword(t, "serve's log", p.output())
	})

	t.Run("gateway", func(t *testing.T) {
		db := pgStoreURL(t)
		f := newProcessFleet(t, "test-cli-pg-", sim.Config{Threads: 10, LatencyScale: 0.1, Seed: 29, PollBan: sim.PollBan{Disabled: true}})
		worker, _ := f.worker("cli-pg-worker", providerKey, regexp.MustCompile(`msg="worker started"`), "--poll-interval", "20ms")
		gw1, base, name := f.serve(db, clients)
		var ids []string
		for i := range 3 {
			ids = append(ids, submit(base, i))
		}
		gw1.stop(t)
		gw2, base2, name2 := f.serve(db, clients)
		if name2 != name {
			t.Fatalf("the restarted gateway is %q, want %q", name2, name)
		}
		for _, id := range ids {
			if token, ok := strings.CutPrefix(answer(base2, id), "OK|"); !ok || len(token) < 100 {
				t.Errorf("res.php %s after the restart: want OK|<token>", id)
			}
		}
		gw2.stop(t)
		worker.stop(t)
		if s := f.sim.Stats(); s.Accepted != 3 || s.Duplicates != 0 {
			t.Errorf("simulator accepted %d (duplicates %d), want 3 and 0", s.Accepted, s.Duplicates)
		}
		for _, p := range []*process{gw1, gw2} {
			noPassword(t, "the gateway's log", p.output())
		}
	})
}
