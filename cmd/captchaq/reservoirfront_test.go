package main

import (
	"fmt"
	"net/url"
	"regexp"
	"testing"
	"time"

	"github.com/captchaq/captchaq/internal/testbound"
	"github.com/captchaq/captchaq/server"
	"github.com/captchaq/captchaq/sim"
	"github.com/captchaq/captchaq/store/postgres"
)

// The shared reservoir's test: its page on the simulator's demo site, its
// fixed size, the draws and their pace.
const (
	sharedPage  = "https://res.shop.example/login"
	sharedHost  = "res.shop.example"
	sharedSize  = 200
	sharedDraws = 1000
	sharedRate  = 60 // draws a second at most
)

var (
	simListeningRE = regexp.MustCompile(`listening on (http://127\.0\.0\.1:\d+)`)
	standbyRE      = regexp.MustCompile(`msg="standby: waiting`)
)

// TestFrontReservoirReplicaKilled: two `serve` replicas on one PostgreSQL
// database (the active queue and a --standby on an address of its own)
// behind the shipped HAProxy config, one reservoir of 200 Turnstile tokens
// of the simulator's demo site, the simulator a process of its own. Once
// the reservoir is full, clients draw 1,000 tokens through the balancer
// (in.php, then res.php), at most 60 a second; once 500 are accepted the
// active replica is SIGKILLed and the standby takes over the database and
// the reservoir's stock. Every accepted task is answered, no token
// answers two tasks, each verifies once at the demo site's siteverify
// (and is refused the second time), and the survivor's /v1/reservoirs
// counts agree with the tasks it took and the tokens in the database.
func TestFrontReservoirReplicaKilled(t *testing.T) {
	t.Parallel()
	bin := captchaqBinary(t)
	db := pgStoreURL(t)
	start := time.Now() // the test's time: past the build and the database's test lock
	_, m := startProcess(t, bin, nil, simListeningRE,
		"sim", "--addr", "127.0.0.1:0", "--threads", "250", "--latency-scale", "0.01", "--no-poll-ban")
	simURL := m[1]
	clients := writeFile(t, "clients.json", `[{"name":"qa","key":"`+frontClient+`","admin":true}]`)
	file := writeFile(t, "reservoirs.json", fmt.Sprintf(`[{"name":"shared","method":"turnstile","params":{"sitekey":%q,"pageurl":%q},"size":%d,"max":%d}]`,
		sim.DemoTurnstile.SiteKey, sharedPage, sharedSize, sharedSize))
	replica := func(addr string, ready *regexp.Regexp, more ...string) *process {
		p, _ := startProcess(t, bin, []string{"CAPTCHAAI_KEY=shared-provider-key"}, ready, append([]string{"serve", "--store", db,
			"--clients", clients, "--reservoirs", file, "--listen", addr, "--api-url", simURL, "--threads", "200",
			"--poll-interval", "20ms"}, more...)...)
		return p
	}
	addrA, addrB := freeAddr(t), freeAddr(t)
	a := replica(addrA, servingRE)
	b := replica(addrB, standbyRE, "--standby")
	base := startHAProxy(t, addrA, addrB)
	testbound.Until(t, "the reservoir full", func() bool {
		return getReservoirs(t, "http://"+addrA, frontClient)[0].Stock == sharedSize
	})
	filled := time.Now()

	// The clients' pace: a draw waits for the next tick.
	pace := time.NewTicker(time.Second / sharedRate)
	defer pace.Stop()
	task := func(int) url.Values {
		<-pace.C
		return url.Values{"key": {frontClient}, "method": {"turnstile"}, "sitekey": {sim.DemoTurnstile.SiteKey}, "pageurl": {sharedPage}}
	}
	var killed time.Time
	run := runFrontTasks(t, base, task, sharedDraws, 8, sharedDraws/2, func(func()) {
		if err := a.cmd.Process.Kill(); err != nil {
			t.Error(err)
			return
		}
		// Every task A took was accepted before its end is seen here;
		// B takes over only after A's session with the database ended,
		// then starts, and gets requests once HAProxy's check finds it.
		select {
		case <-a.done:
			killed = time.Now()
		case <-time.After(testbound.Bound):
			t.Errorf("the active replica still runs %v after its SIGKILL", testbound.Bound)
		}
	})
	drawn := time.Now()
	for _, msg := range run.failures {
		t.Error(msg)
	}
	if len(run.tokens) != sharedDraws {
		t.Errorf("%d of %d accepted tasks answered", len(run.tokens), sharedDraws)
	}
	checkTokensOnce(t, simURL, run)
	waitOutput(t, b, servingRE)
	var v []server.ReservoirView
	testbound.Until(t, "the survivor's stock full again, none in flight", func() bool {
		v = getReservoirs(t, "http://"+addrB, frontClient)
		return v[0].Stock == sharedSize && v[0].InFlight == 0
	})
	hitsAfter, acceptedAfter, stock := sharedCounts(t, db, killed)
	if c := v[0]; c.Hits != hitsAfter || c.HandedOut != hitsAfter || c.Hits+c.Misses != acceptedAfter || stock != c.Stock || c.Expired != 0 || c.Failed != 0 {
		t.Errorf("the survivor's /v1/reservoirs: %+v; want hits = handed out = %d (the hits it took), hits + misses = %d (the tasks it took), stock = %d (the database's), none expired or failed",
			c, hitsAfter, acceptedAfter, stock)
	}
	hits, _, _ := sharedCounts(t, db, time.Time{})
	t.Logf("%d draws, active replica killed after %d: %d answered, %d from the reservoir (%d by the survivor, of %d it took), %d temporary answers; filled in %v, drawn in %v, whole test %v",
		sharedDraws, sharedDraws/2, len(run.tokens), hits, hitsAfter, acceptedAfter, run.temporary.Load(),
		filled.Sub(start).Round(100*time.Millisecond), drawn.Sub(filled).Round(100*time.Millisecond), time.Since(start).Round(100*time.Millisecond))
}

// checkTokensOnce asserts no token answers two of run's tasks, and that
// each verifies once at the simulator's siteverify, for the shared page,
// and is refused the second time.
func checkTokensOnce(t *testing.T, simURL string, run *frontRun) {
	t.Helper()
	byToken := map[string]int{}
	twice := 0
	for i, token := range run.tokens {
		if j, ok := byToken[token]; ok {
			if twice++; twice <= 5 {
				t.Errorf("tasks %d (%s) and %d (%s) were answered with one token", j, run.ids[j], i, run.ids[i])
			}
			continue
		}
		byToken[token] = i
		if host := siteverifyHost(t, simURL, token); host != sharedHost {
			t.Errorf("task %d's token: siteverify answered host %q, want %q (verified once)", i, host, sharedHost)
		}
		if host := siteverifyHost(t, simURL, token); host != "" {
			t.Errorf("task %d's token verified a second time (host %q)", i, host)
		}
	}
	if twice > 0 {
		t.Errorf("%d answers with a token another task had, want none", twice)
	}
}

// sharedCounts reads the database: of the client's tasks accepted after
// since, those answered from the reservoir (hits) and all of them
// (accepted); the reservoir's tokens in stock.
func sharedCounts(t *testing.T, db string, since time.Time) (hits, accepted int64, stock int) {
	t.Helper()
	st, err := postgres.Open(t.Context(), db, postgres.Config{Retention: postgres.RetentionOff})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	err = st.Pool().QueryRow(t.Context(), `SELECT count(*) FILTER (WHERE result_reservoir = 'shared'), count(*),
			(SELECT count(*) FROM reservoir_tokens WHERE reservoir = 'shared')
		FROM tasks WHERE id LIKE 'qa/%' AND accepted_at > $1`, since).Scan(&hits, &accepted, &stock)
	if err != nil {
		t.Fatal(err)
	}
	return hits, accepted, stock
}
