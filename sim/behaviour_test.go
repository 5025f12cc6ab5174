package sim_test

import (
	"errors"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/captchaq/captchaq/provider"
	"github.com/captchaq/captchaq/sim"
)

// tenSeconds gives every kind a fixed 10 s solve time.
func tenSeconds() map[provider.Kind]sim.Latency {
	lat := map[provider.Kind]sim.Latency{}
	for k := range sim.DefaultLatency {
		lat[k] = fixed(10 * time.Second)
	}
	return lat
}

func TestThreadLimit(t *testing.T) {
	t.Parallel()
	for _, answer := range []string{"", sim.NoSlotAnswerZeroBalance} {
		want := answer
		if want == "" {
			want = sim.NoSlotAnswerDefault
		}
		t.Run(want, func(t *testing.T) {
			t.Parallel()
			clock := newManualClock()
			b := setup(t, sim.Config{Threads: 3, NoSlotAnswer: answer, Latency: tenSeconds(), Now: clock.Now})
			var ids []string
			for range 3 {
				ids = append(ids, b.submit(t, recaptcha()))
			}
			for range 2 {
				if a := decode(t, b.post(t, "/in.php", recaptcha())); a.Status != 0 || a.str(t) != want {
					t.Fatalf("submit over the limit: %s, want %s", a.Request, want)
				}
			}
			if plain := b.post(t, "/in.php", withJSON(recaptcha(), false)); plain != want {
				t.Fatalf("plain submit over the limit: %q", plain)
			}
			st := b.srv.Stats()
			if st.Accepted != 3 || st.NoSlot != 3 || st.ThreadsInUse != 3 || st.PeakThreadsInUse != 3 {
				t.Fatalf("stats %+v: want 3 accepted, 3 no-slot, 3 in use, peak 3", st)
			}
			ti := decode(t, b.get(t, "/res.php", form("key", key, "action", "threadsinfo", "json", "1")))
			if string(ti.Request) != `{"threads":3,"working_threads":3,"free_threads":0}` {
				t.Fatalf("threadsinfo %s", ti.Request)
			}
			clock.Advance(10 * time.Second) // all three solved: threads free
			for range 3 {
				ids = append(ids, b.submit(t, recaptcha()))
			}
			if a := decode(t, b.post(t, "/in.php", recaptcha())); a.str(t) != want {
				t.Fatalf("fourth submit of the second wave: %s", a.Request)
			}
			if st := b.srv.Stats(); st.Accepted != 6 || st.NoSlot != 4 || st.Solved != 3 || st.ThreadsInUse != 3 {
				t.Fatalf("stats %+v: want 6 accepted, 4 no-slot, 3 solved, 3 in use", st)
			}
		})
	}
}

func TestUnsolvableRate(t *testing.T) {
	t.Parallel()
	const n = 400
	run := func(t *testing.T, rate float64, seed uint64) []string {
		b := setup(t, sim.Config{Threads: n, Instant: true, UnsolvableRate: rate, Seed: seed})
		var unsolvable []string
		for range n {
			id := b.submit(t, recaptcha())
			a := b.poll(t, id)
			switch {
			case a.Status == 0 && a.str(t) == "ERROR_CAPTCHA_UNSOLVABLE":
				unsolvable = append(unsolvable, id)
			case a.Status != 1:
				t.Fatalf("poll %s: %s", id, a.Request)
			}
		}
		st := b.srv.Stats()
		if st.Unsolvable != int64(len(unsolvable)) || st.Solved != int64(n-len(unsolvable)) {
			t.Fatalf("stats unsolvable %d solved %d, polls saw %d unsolvable", st.Unsolvable, st.Solved, len(unsolvable))
		}
		return unsolvable
	}
	t.Run("share", func(t *testing.T) {
		t.Parallel()
		first := run(t, 0.25, 7)
		// Binomial(400, 0.25): mean 100, sd 8.7; [60, 140] is beyond 4.5 sd.
		if len(first) < 60 || len(first) > 140 {
			t.Fatalf("%d of %d unsolvable at rate 0.25", len(first), n)
		}
		if again := run(t, 0.25, 7); strings.Join(again, ",") != strings.Join(first, ",") {
			t.Fatalf("same seed gave other unsolvable ids")
		}
	})
	t.Run("none", func(t *testing.T) {
		t.Parallel()
		if got := run(t, 0, 7); len(got) != 0 {
			t.Fatalf("%d unsolvable at rate 0", len(got))
		}
	})
	t.Run("all", func(t *testing.T) {
		t.Parallel()
		if got := run(t, 1, 7); len(got) != n {
			t.Fatalf("%d unsolvable at rate 1", len(got))
		}
	})
}

func TestBulk(t *testing.T) {
	t.Parallel()
	clock := newManualClock()
	lat := tenSeconds()
	lat[provider.KindImage] = fixed(time.Second)
	b := setup(t, sim.Config{Threads: 10, Latency: lat, Now: clock.Now})
	img := b.submit(t, form("key", key, "method", "base64", "body", "aGVsbG8gd29ybGQ="))
	rc := b.submit(t, recaptcha())
	clock.Advance(time.Second)
	text := b.poll(t, img).str(t)
	ids := strings.Join([]string{img, rc, "70000000000", "x"}, ",")
	want := text + "|CAPCHA_NOT_READY|ERROR_WRONG_CAPTCHA_ID|ERROR_WRONG_ID_FORMAT"

	a := decode(t, b.get(t, "/res.php", form("key", key, "action", "get", "ids", ids, "json", "1")))
	if a.Status != 1 || a.str(t) != want {
		t.Fatalf("bulk json %+v, want %q", a, want)
	}
	if plain := b.post(t, "/res.php", form("key", key, "action", "get", "ids", ids)); plain != want {
		t.Fatalf("bulk plain %q, want %q", plain, want)
	}
	many := strings.TrimSuffix(strings.Repeat(img+",", 101), ",")
	if a := decode(t, b.get(t, "/res.php", form("key", key, "action", "get", "ids", many, "json", "1"))); a.str(t) != "ERROR_BAD_PARAMETERS" {
		t.Fatalf("101 ids: %s", a.Request)
	}
	st := b.srv.Stats()
	if st.Calls.PollBulk != 3 || st.Calls.PollSingle != 1 || st.IDsPolled != 1+4+4 {
		t.Fatalf("calls %+v ids polled %d: want 3 bulk, 1 single, 9 ids", st.Calls, st.IDsPolled)
	}

	t.Run("off", func(t *testing.T) {
		t.Parallel()
		off := setup(t, sim.Config{Threads: 10, NoBulk: true, Instant: true})
		id := off.submit(t, recaptcha())
		if a := decode(t, off.get(t, "/res.php", form("key", key, "action", "get", "ids", id, "json", "1"))); a.Status != 0 || a.str(t) != "ERROR_WRONG_ID_FORMAT" {
			t.Fatalf("ids= on a provider without bulk: %s", a.Request)
		}
		// With id= as well, ids= is ignored: the answer is id's token alone.
		tok := off.poll(t, id).str(t)
		both := decode(t, off.get(t, "/res.php", form("key", key, "action", "get", "id", id, "ids", id+","+id, "json", "1")))
		if both.str(t) != tok {
			t.Fatalf("id and ids on a provider without bulk: %s, want the single token", both.Request)
		}
	})
}

func TestPollBan(t *testing.T) {
	t.Parallel()
	clock := newManualClock()
	b := setup(t, sim.Config{Threads: 5, Latency: tenSeconds(), Now: clock.Now,
		PollBan: sim.PollBan{Max: 3, Window: 5 * time.Second, Duration: time.Minute}})
	id := b.submit(t, recaptcha())
	for i := range 3 {
		if a := b.poll(t, id); a.str(t) != "CAPCHA_NOT_READY" {
			t.Fatalf("poll %d: %s", i+1, a.Request)
		}
	}
	clock.Advance(5 * time.Second) // a new window: three more polls are fine
	for i := range 3 {
		if a := b.poll(t, id); a.str(t) != "CAPCHA_NOT_READY" {
			t.Fatalf("poll %d of the second window: %s", i+1, a.Request)
		}
	}
	if a := b.poll(t, id); a.Status != 0 || a.str(t) != "IP_BANNED" {
		t.Fatalf("fourth poll in a window: %s, want IP_BANNED", a.Request)
	}
	if got := b.post(t, "/in.php", withJSON(recaptcha(), false)); got != "IP_BANNED" {
		t.Fatalf("submit while banned: %q", got)
	}
	if got := b.get(t, "/res.php", form("key", key, "action", "getbalance")); got != "IP_BANNED" {
		t.Fatalf("balance while banned: %q", got)
	}
	clock.Advance(time.Minute - time.Nanosecond)
	if a := b.poll(t, id); a.str(t) != "IP_BANNED" {
		t.Fatalf("1ns before the ban ends: %s", a.Request)
	}
	clock.Advance(time.Nanosecond)
	if a := b.poll(t, id); a.Status != 1 {
		t.Fatalf("after the ban: %s", a.Request)
	}
	if st := b.srv.Stats(); st.Bans != 1 {
		t.Fatalf("bans %d, want 1", st.Bans)
	}

	t.Run("bulk counts each id and unban lifts", func(t *testing.T) {
		t.Parallel()
		c := newManualClock()
		b := setup(t, sim.Config{Threads: 5, Latency: tenSeconds(), Now: c.Now, PollBan: sim.PollBan{Max: 2}})
		id := b.submit(t, recaptcha())
		ids := form("key", key, "action", "get", "ids", id+","+id+","+id)
		if got := b.get(t, "/res.php", ids); got != "IP_BANNED" {
			t.Fatalf("one id three times in one bulk call: %q", got)
		}
		b.srv.Unban()
		if a := b.poll(t, id); a.str(t) != "CAPCHA_NOT_READY" {
			t.Fatalf("after Unban: %s", a.Request)
		}
	})
	t.Run("disabled", func(t *testing.T) {
		t.Parallel()
		b := setup(t, sim.Config{Threads: 5, Latency: tenSeconds(), Now: newManualClock().Now, PollBan: sim.PollBan{Disabled: true, Max: 1}})
		id := b.submit(t, recaptcha())
		for range 5 {
			if a := b.poll(t, id); a.str(t) != "CAPCHA_NOT_READY" {
				t.Fatalf("poll with bans off: %s", a.Request)
			}
		}
	})
}

func TestFaults(t *testing.T) {
	t.Parallel()
	t.Run("5xx", func(t *testing.T) {
		t.Parallel()
		b := setup(t, sim.Config{Threads: 5, Faults: sim.Faults{HTTP5xxRate: 1}})
		for path, status := range map[string]int{"/in.php": http.StatusBadGateway, "/res.php": http.StatusServiceUnavailable} {
			resp, err := http.PostForm(b.base+path, recaptcha("action", "get", "id", "1"))
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != status || !strings.Contains(string(body), "<html>") || resp.Header.Get("Content-Type") != "text/html" {
				t.Fatalf("%s: %d %q, want %d with an HTML page", path, resp.StatusCode, body, status)
			}
		}
		if st := b.srv.Stats(); st.Faults.HTTP5xx != 2 || st.Faults.Total != 2 || st.Accepted != 0 {
			t.Fatalf("faults %+v accepted %d", st.Faults, st.Accepted)
		}
	})
	t.Run("drop", func(t *testing.T) {
		t.Parallel()
		b := setup(t, sim.Config{Threads: 5, Faults: sim.Faults{DropRate: 1}})
		resp, err := http.PostForm(b.base+"/in.php", recaptcha())
		if err == nil {
			resp.Body.Close()
			t.Fatalf("dropped call answered %d", resp.StatusCode)
		}
		var ue *url.Error
		if !errors.As(err, &ue) || !(errors.Is(err, io.EOF) || strings.Contains(err.Error(), "reset") || strings.Contains(err.Error(), "EOF")) {
			t.Fatalf("dropped call: %v, want EOF or reset", err)
		}
		if st := b.srv.Stats(); st.Faults.Dropped < 1 || st.Accepted != 0 {
			t.Fatalf("faults %+v accepted %d", st.Faults, st.Accepted)
		}
	})
	t.Run("slow", func(t *testing.T) {
		t.Parallel()
		b := setup(t, sim.Config{Threads: 5, Faults: sim.Faults{SlowRate: 1, SlowDelay: time.Millisecond}})
		b.submit(t, recaptcha())
		if st := b.srv.Stats(); st.Faults.Slow != 1 || st.Accepted != 1 {
			t.Fatalf("faults %+v accepted %d: a slow call is still processed", st.Faults, st.Accepted)
		}
	})
}

func TestAccountStates(t *testing.T) {
	t.Parallel()
	b := setup(t, sim.Config{Threads: 5, Latency: tenSeconds(), Now: newManualClock().Now})
	id := b.submit(t, recaptcha())
	balance := form("key", key, "action", "getbalance")
	if got := b.get(t, "/res.php", balance); got != "15" {
		t.Fatalf("balance %q, want the default 15", got)
	}
	tests := []struct {
		name, set         string
		submit, poll, bal string
	}{
		{"bad key", "bad_key=1", "ERROR_WRONG_USER_KEY", "ERROR_WRONG_USER_KEY", "ERROR_WRONG_USER_KEY"},
		{"zero balance", "zero_balance=true", "ERROR_ZERO_BALANCE", "CAPCHA_NOT_READY", "0"},
		{"ip banned", "ip_banned=1", "IP_BANNED", "IP_BANNED", "IP_BANNED"},
	}
	for _, tt := range tests {
		resp, err := http.Post(b.base+"/sim/account", "application/x-www-form-urlencoded", strings.NewReader(tt.set))
		if err != nil {
			t.Fatal(err)
		}
		readBody(t, resp)
		if got := b.post(t, "/in.php", withJSON(recaptcha(), false)); got != tt.submit {
			t.Errorf("%s: submit %q, want %q", tt.name, got, tt.submit)
		}
		if got := b.get(t, "/res.php", form("key", key, "action", "get", "id", id)); got != tt.poll {
			t.Errorf("%s: poll %q, want %q", tt.name, got, tt.poll)
		}
		if got := b.get(t, "/res.php", balance); got != tt.bal {
			t.Errorf("%s: balance %q, want %q", tt.name, got, tt.bal)
		}
		b.srv.SetAccount(sim.Account{})
	}
	if got := b.srv.Account(); got != (sim.Account{}) {
		t.Fatalf("account %+v after reset", got)
	}
	b.srv.SetAccount(sim.Account{ZeroBalance: true})
	resp, err := http.Get(b.base + "/sim/account")
	if err != nil {
		t.Fatal(err)
	}
	if got := readBody(t, resp); !strings.Contains(got, `"zero_balance": true`) || !strings.Contains(got, `"bad_key": false`) {
		t.Fatalf("GET /sim/account: %s", got)
	}
}

// A report is taken once per solved task, within ReportWindow of its
// answer: a second one, one of a task not solved, unknown or too late is
// refused with 2captcha's code, and only taken ones are counted.
func TestReports(t *testing.T) {
	t.Parallel()
	clock := newManualClock()
	b := setup(t, sim.Config{Threads: 5, Latency: tenSeconds(), Now: clock.Now, ReportWindow: time.Minute, FetchedRetention: time.Hour})
	id, late := b.submit(t, recaptcha()), b.submit(t, recaptcha())
	clock.Advance(10 * time.Second)
	waiting := b.submit(t, recaptcha())
	report := func(action, id string) string {
		return b.get(t, "/res.php", form("key", key, "action", action, "id", id))
	}
	if got := report("reportbad", id); got != "OK_REPORT_RECORDED" {
		t.Fatalf("reportbad %q", got)
	}
	if a := decode(t, b.get(t, "/res.php", form("key", key, "action", "reportgood", "id", id, "json", "1"))); a.Status != 0 || a.str(t) != "ERROR_DUPLICATE_REPORT" {
		t.Fatalf("a second report: %s, want ERROR_DUPLICATE_REPORT", a.Request)
	}
	if got := report("reportbad", "123"); got != "ERROR_WRONG_CAPTCHA_ID" {
		t.Fatalf("report of an unknown id %q", got)
	}
	if got := report("reportbad", waiting); got != "ERROR_WRONG_CAPTCHA_ID" {
		t.Fatalf("report of a task not solved %q", got)
	}
	clock.Advance(time.Minute)
	if got := report("reportgood", late); got != "OK_REPORT_RECORDED" {
		t.Fatalf("a report a minute after the answer: %q", got)
	}
	if got := report("reportbad", waiting); got != "OK_REPORT_RECORDED" {
		t.Fatalf("a report 50 s after the answer: %q", got)
	}
	waiting2 := b.submit(t, recaptcha())
	clock.Advance(time.Minute + 10*time.Second + time.Nanosecond)
	if got := report("reportbad", waiting2); got != "ERROR_REPORT_NOT_RECORDED" {
		t.Fatalf("a report past the window: %q", got)
	}
	if st := b.srv.Stats(); st.ReportsBad != 2 || st.ReportsGood != 1 || st.Calls.Report != 7 {
		t.Fatalf("reports bad %d good %d calls %d; want 2, 1, 7", st.ReportsBad, st.ReportsGood, st.Calls.Report)
	}
}

func TestForgetting(t *testing.T) {
	t.Parallel()
	clock := newManualClock()
	b := setup(t, sim.Config{Threads: 5, Latency: tenSeconds(), Now: clock.Now,
		FetchedRetention: 5 * time.Second, ResultTTL: time.Minute})
	fetched := b.submit(t, recaptcha())
	waiting := b.submit(t, recaptcha())
	clock.Advance(10 * time.Second)
	if a := b.poll(t, fetched); a.Status != 1 {
		t.Fatalf("poll: %s", a.Request)
	}
	clock.Advance(5*time.Second - time.Nanosecond)
	if a := b.poll(t, fetched); a.Status != 1 {
		t.Fatalf("within the retention: %s", a.Request)
	}
	clock.Advance(time.Nanosecond)
	if a := b.poll(t, fetched); a.str(t) != "ERROR_WRONG_CAPTCHA_ID" {
		t.Fatalf("after the retention: %s", a.Request)
	}
	if st := b.srv.Stats(); st.TasksKept != 1 || st.Fetched != 1 {
		t.Fatalf("tasks kept %d fetched %d, want 1 and 1", st.TasksKept, st.Fetched)
	}
	clock.Advance(time.Minute - 5*time.Second) // a minute after the solve
	if a := b.poll(t, waiting); a.str(t) != "ERROR_WRONG_CAPTCHA_ID" {
		t.Fatalf("unfetched answer after its TTL: %s", a.Request)
	}
	if st := b.srv.Stats(); st.TasksKept != 0 {
		t.Fatalf("tasks kept %d, want 0", st.TasksKept)
	}
}

func TestPerSolveProvider(t *testing.T) {
	t.Parallel()
	clock := newManualClock()
	b := setup(t, sim.Config{Threads: 5, Key: key, Latency: tenSeconds(), Now: clock.Now,
		Methods: []string{"hcaptcha", "turnstile"}, PricePer1000: 2000, Balance: 5})
	hc := form("key", key, "method", "hcaptcha", "sitekey", "10000000-ffff", "pageurl", "https://a.example/")
	if a := decode(t, b.post(t, "/in.php", recaptcha())); a.Status != 0 || a.str(t) != "ERROR_BAD_PARAMETERS" || a.ErrorText != "reCAPTCHA is not supported by this service." {
		t.Fatalf("reCAPTCHA at an hCaptcha service: %s %q", a.Request, a.ErrorText)
	}
	if a := decode(t, b.post(t, "/in.php", form("key", key, "method", "hcaptcha", "pageurl", "https://a.example/", "json", "1"))); a.str(t) != "ERROR_BAD_PARAMETERS" || !strings.Contains(a.ErrorText, "sitekey") {
		t.Fatalf("hcaptcha without sitekey: %s %q", a.Request, a.ErrorText)
	}
	ids := []string{b.submit(t, hc), b.submit(t, hc)}
	clock.Advance(10 * time.Second)
	for _, id := range ids {
		if a := b.poll(t, id); a.Status != 1 {
			t.Fatalf("poll %s: %s", id, a.Request)
		}
	}
	// Two solves at 2 each took 4 of 5: a third cannot be paid for.
	if bal := decode(t, b.get(t, "/res.php", form("key", key, "action", "getbalance", "json", "1"))).str(t); bal != "1" {
		t.Fatalf("balance %s after two solves, want 1", bal)
	}
	if a := decode(t, b.post(t, "/in.php", withJSON(hc, true))); a.str(t) != "ERROR_ZERO_BALANCE" {
		t.Fatalf("submit past the balance: %s", a.Request)
	}
	if st := b.srv.Stats(); st.Spent != 4 || st.Solved != 2 {
		t.Fatalf("stats spent %v solved %d, want 4 and 2", st.Spent, st.Solved)
	}
}
