package main

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/captchaq/captchaq/sim"
)

// serve --metrics-listen: /metrics without a key on the operator's
// address; on --listen it needs an admin key.
func TestServeMetricsListen(t *testing.T) {
	t.Parallel()
	ss, apiURL, err := sim.Start(sim.Config{LatencyScale: 0.01, Seed: 3}, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ss.Close() })
	clients := writeFile(t, "clients.json", `[{"name":"qa","key":"client-key-1"},{"name":"ops","key":"admin-key-1","admin":true}]`)
	p, m := startProcess(t, captchaqBinary(t), []string{"CAPTCHAAI_KEY=metrics-test-key"}, regexp.MustCompile(`msg=serving addr=(127\.0\.0\.1:\d+)`),
		"serve", "--store", "memory", "--clients", clients, "--api-url", apiURL, "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0")
	defer p.stop(t)
	mm := regexp.MustCompile(`msg="serving metrics" addr=(127\.0\.0\.1:\d+)`).FindStringSubmatch(p.output())
	if mm == nil {
		t.Fatalf("no metrics address logged:\n%s", p.output())
	}
	get := func(u, key string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest("GET", u, nil)
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get("http://"+mm[1]+"/metrics", ""); code != 200 || !strings.Contains(body, "captchaq_tasks_submitted_total") {
		t.Errorf("operator address: %d %.200s", code, body)
	}
	for key, want := range map[string]int{"": 401, "client-key-1": 401, "admin-key-1": 200} {
		if code, _ := get("http://"+m[1]+"/metrics", key); code != want {
			t.Errorf("main /metrics with key %q: %d, want %d", key, code, want)
		}
	}
}

// serve polls with the queue's default scheduler unless --poll-interval
// is given: the queue says which cadence it follows as it starts.
func TestServePollCadence(t *testing.T) {
	t.Parallel()
	ss, apiURL, err := sim.Start(sim.Config{LatencyScale: 0.01, Seed: 3}, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ss.Close() })
	clients := writeFile(t, "clients.json", `[{"name":"qa","key":"client-key-1"}]`)
	for _, c := range []struct {
		flags []string
		want  string
	}{
		{nil, "schedule=default poll_gap=500ms"},
		{[]string{"--poll-interval", "250ms"}, "schedule=fixed poll_interval=250ms"},
	} {
		args := append([]string{"serve", "--store", "memory", "--clients", clients, "--api-url", apiURL, "--listen", "127.0.0.1:0"}, c.flags...)
		p, m := startProcess(t, captchaqBinary(t), []string{"CAPTCHAAI_KEY=cadence-test-key"}, regexp.MustCompile(`msg=polling (.*)`), args...)
		p.stop(t)
		if m[1] != c.want {
			t.Errorf("serve %v: polling %q, want %q", c.flags, m[1], c.want)
		}
	}
}

// serve caps the connections from one address (--max-conns-per-address):
// past it a connection is closed unanswered, idle keep-alives included.
func TestServeCapsConnectionsPerAddress(t *testing.T) {
	t.Parallel()
	ss, apiURL, err := sim.Start(sim.Config{LatencyScale: 0.01, Seed: 3}, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ss.Close() })
	clients := writeFile(t, "clients.json", `[{"name":"qa","key":"client-key-1"}]`)
	p, m := startProcess(t, captchaqBinary(t), []string{"CAPTCHAAI_KEY=conns-test-key"}, regexp.MustCompile(`msg=serving addr=(127\.0\.0\.1:\d+)`),
		"serve", "--store", "memory", "--clients", clients, "--api-url", apiURL, "--listen", "127.0.0.1:0", "--max-conns-per-address", "2")
	defer p.stop(t)
	answered := func() bool {
		c, err := net.Dial("tcp", m[1])
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: captchaq.test\r\n\r\n")
		c.SetReadDeadline(time.Now().Add(time.Minute)) // a bound, not a measure
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}
	for i, want := range []bool{true, true, false, false} {
		if got := answered(); got != want {
			t.Errorf("connection %d (the others left open): answered %v, want %v", i+1, got, want)
		}
	}
}
