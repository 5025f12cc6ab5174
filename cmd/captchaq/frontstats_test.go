package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/captchaq/captchaq/internal/testbound"
	"github.com/captchaq/captchaq/sim"
)

// adminCall sends method url with the front client's key as a bearer
// and returns the status and body.
func adminCall(t *testing.T, method, url string, body []byte) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+frontClient)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	b.ReadFrom(resp.Body)
	return resp.StatusCode, b.Bytes()
}

// frontStats is the part of /v1/stats this test reads.
type frontStats struct {
	Clients []struct {
		Name                     string
		Inflight                 int
		Accepted, Solved, Failed int64
	} `json:"clients"`
	DeadLetters int `json:"dead_letters"`
}

func statsOf(t *testing.T, base string) frontStats {
	t.Helper()
	status, body := adminCall(t, "GET", base+"/v1/stats", nil)
	if status != http.StatusOK {
		t.Fatalf("%s/v1/stats: %d %s", base, status, body)
	}
	var st frontStats
	if err := json.Unmarshal(body, &st); err != nil {
		t.Fatal(err)
	}
	return st
}

// seriesLine matches a sample line of the Prometheus text format: the
// name, the labels.
var seriesLine = regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{.*\})? `)

// TestFrontCoversEveryReplica: two replicas of one front on PostgreSQL,
// one named with --replica-name, the other by its host and port. Tasks
// taken by either die in the broker (their task queue's TTL runs out
// before a worker starts): each replica lists all four dead letters and
// counts them in /v1/stats; once a worker runs, the replica that did not
// take two of them replays them, and the one that took them answers them;
// both replicas count the front's solves, in /v1/stats and in the
// dashboard's charts; every series of either replica's /metrics carries
// its own replica label.
func TestFrontCoversEveryReplica(t *testing.T) {
	t.Parallel()
	db := pgStoreURL(t)
	f := newProcessFleet(t, "test-cli-cov-", sim.Config{Threads: 10, LatencyScale: 0.05, Seed: 13, PollBan: sim.PollBan{Disabled: true}})
	clients := writeFile(t, "clients.json", `[{"name":"qa","key":"`+frontClient+`","admin":true}]`)
	const ttl = "3s"
	a, baseA, _ := f.serveWith(db, clients, nil, "--task-ttl", ttl, "--replica-name", "front-a")
	b, baseB, _ := f.serveWith(db, clients, nil, "--task-ttl", ttl)
	// B's default name: its host and port.
	m := regexp.MustCompile(`replica=(\S+)`).FindStringSubmatch(b.output())
	_, port, _ := strings.Cut(strings.TrimPrefix(baseB, "http://"), ":")
	if m == nil || !strings.HasSuffix(m[1], ":"+port) || strings.HasPrefix(m[1], ":") {
		t.Fatalf("replica B's log names it %v, want HOST:%s", m, port)
	}
	nameB := m[1]

	var idsA, idsB []string
	for i := range 4 {
		base := []string{baseA, baseB}[i%2]
		id, err := inPHP(base, frontTask(i))
		if err != nil {
			t.Fatalf("task %d: %v", i, err)
		}
		if base == baseA {
			idsA = append(idsA, id)
		} else {
			idsB = append(idsB, id)
		}
	}
	all := slices.Concat(idsA, idsB)
	slices.Sort(all)
	// Every dead letter of the front, at each replica.
	for _, base := range []string{baseA, baseB} {
		var body []byte
		var dl struct {
			DeadLetters []struct {
				ID     string `json:"id"`
				Result struct {
					ErrorCode string `json:"error_code"`
				} `json:"result"`
			} `json:"dead_letters"`
			Total int `json:"total"`
		}
		if !testbound.Eventually(func() bool {
			var status int
			status, body = adminCall(t, "GET", base+"/v1/deadletters", nil)
			if status != http.StatusOK || json.Unmarshal(body, &dl) != nil {
				t.Fatalf("%s/v1/deadletters: %d %s", base, status, body)
			}
			return dl.Total == len(all)
		}) {
			t.Fatalf("%s lists %d dead letters, want %d: %s", base, dl.Total, len(all), body)
		}
		var got []string
		for _, d := range dl.DeadLetters {
			got = append(got, d.ID)
			if d.Result.ErrorCode != "EXPIRED" {
				t.Errorf("%s: dead letter %s failed %q, want EXPIRED", base, d.ID, d.Result.ErrorCode)
			}
		}
		slices.Sort(got)
		if !slices.Equal(got, all) {
			t.Errorf("%s lists dead letters %v, want %v", base, got, all)
		}
	}
	// /v1/stats at each: the front's dead letters, and the client's
	// failures whichever replica stored them.
	for _, base := range []string{baseA, baseB} {
		var st frontStats
		if !testbound.Eventually(func() bool {
			st = statsOf(t, base)
			return st.DeadLetters == 4 && len(st.Clients) == 1 && st.Clients[0].Failed == 4 && st.Clients[0].Accepted == 4 && st.Clients[0].Inflight == 0
		}) {
			t.Fatalf("%s/v1/stats: %+v, want 4 dead letters, 4 accepted and 4 failed, none in flight", base, st)
		}
	}

	// A worker now; A's dead letters replayed through B, answered at A.
	f.worker("cli-cov-worker", "cov-provider-key", workerStartedRE, "--poll-interval", "20ms", "--task-ttl", ttl)
	body, _ := json.Marshal(map[string]any{"ids": idsA})
	status, out := adminCall(t, "POST", baseB+"/v1/deadletters/replay", body)
	if status != http.StatusOK {
		t.Fatalf("replay at B: %d %s", status, out)
	}
	var rep struct {
		Replayed int `json:"replayed"`
	}
	if json.Unmarshal(out, &rep) != nil || rep.Replayed != len(idsA) {
		t.Fatalf("replay at B: %s, want %d replayed", out, len(idsA))
	}
	for _, id := range idsA {
		ans, err := resPHPAnswer(t, baseA, id)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(ans, "OK|") {
			t.Fatalf("res.php %s at A after the replay at B: %q", id, ans)
		}
	}
	for _, base := range []string{baseA, baseB} {
		var st frontStats
		if !testbound.Eventually(func() bool {
			st = statsOf(t, base)
			return st.DeadLetters == 2 && len(st.Clients) == 1 && st.Clients[0].Solved == 2 && st.Clients[0].Inflight == 0
		}) {
			t.Fatalf("%s/v1/stats after the replay: %+v, want 2 dead letters, 2 solved, none in flight", base, st)
		}
	}

	// /metrics: each replica's series under its own name.
	for _, r := range []struct{ base, name string }{{baseA, "front-a"}, {baseB, nameB}} {
		status, body := adminCall(t, "GET", r.base+"/metrics", nil)
		if status != http.StatusOK {
			t.Fatalf("%s/metrics: %d", r.base, status)
		}
		label := `replica="` + r.name + `"`
		samples, solved := 0, false
		sc := bufio.NewScanner(bytes.NewReader(body))
		for sc.Scan() {
			line := sc.Text()
			if strings.HasPrefix(line, "#") || line == "" {
				continue
			}
			samples++
			m := seriesLine.FindStringSubmatch(line)
			if m == nil || !strings.Contains(m[2], label) {
				t.Errorf("%s/metrics: %q has no %s", r.base, line, label)
				continue
			}
			if m[1] == "captchaq_client_tasks_solved_total" && strings.HasSuffix(line, " 2") {
				solved = true
			}
		}
		if samples == 0 || !solved {
			t.Errorf("%s/metrics: %d samples, client solved 2 found: %v\n%s", r.base, samples, solved, body)
		}
	}
	// The dashboard's charts (/v1/history, a sample every 5 s): each
	// replica charts the front's failures and solves, whichever replica
	// stored them.
	for _, base := range []string{baseA, baseB} {
		var body []byte
		if !testbound.Eventually(func() bool {
			var status int
			status, body = adminCall(t, "GET", base+"/v1/history", nil)
			var h struct {
				SolvedPerMin []*float64 `json:"solved_per_min"`
				FailedPerMin []*float64 `json:"failed_per_min"`
			}
			if status != http.StatusOK || json.Unmarshal(body, &h) != nil {
				t.Fatalf("%s/v1/history: %d %s", base, status, body)
			}
			return total(h.SolvedPerMin) > 0 && total(h.FailedPerMin) > 0
		}) {
			t.Fatalf("%s/v1/history charts no solve or no failure: %s", base, body)
		}
	}
	a.stop(t)
	b.stop(t)
}

// total adds a chart's points, null ones as 0.
func total(points []*float64) float64 {
	sum := 0.0
	for _, p := range points {
		if p != nil {
			sum += *p
		}
	}
	return sum
}
