package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/captchaq/captchaq/internal/testbound"
	"github.com/captchaq/captchaq/server"
)

const (
	resClientKey = "res-client-key-1"
	resAdminKey  = "res-admin-key-01"
	resSitekey   = "0x4AAAAAAAreservoir"
)

// reservoirsFile is a reservoirs file of turnstile reservoirs by name,
// each for its own page of shop.example, of size 2.
func reservoirsFile(names ...string) string {
	var es []string
	for _, n := range names {
		es = append(es, `{"name":"`+n+`","method":"turnstile","params":{"sitekey":"`+resSitekey+`","pageurl":"https://shop.example/`+n+`"},"size":2,"clients":["qa"]}`)
	}
	return "[" + strings.Join(es, ",") + "]"
}

// getReservoirs is GET /v1/reservoirs at base with the admin key.
func getReservoirs(t *testing.T, base, adminKey string) []server.ReservoirView {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, base+"/v1/reservoirs", nil)
	req.Header.Set("Authorization", "Bearer "+adminKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct{ Reservoirs []server.ReservoirView }
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /v1/reservoirs: HTTP %d, %v", resp.StatusCode, err)
	}
	return out.Reservoirs
}

// serve --reservoirs as a process on the built-in simulator: once the
// reservoir is full, an unchanged 2captcha client's in.php submit (a
// plain form) gets its token at its first res.php poll, and GET
// /v1/reservoirs counts the hit. SIGHUP reads the file again: a reservoir
// added appears beside the one kept (its counts kept); a bad file keeps
// the last good set and logs why.
func TestServeReservoirs(t *testing.T) {
	t.Parallel()
	clients := writeFile(t, "clients.json", `[{"name":"qa","key":"`+resClientKey+`"},{"name":"ops","key":"`+resAdminKey+`","admin":true}]`)
	file := writeFile(t, "reservoirs.json", reservoirsFile("checkout"))
	p, m := startProcess(t, captchaqBinary(t), nil, servingRE, "serve", "--clients", clients, "--store", "memory",
		"--threads", "8", "--listen", "127.0.0.1:0", "--reservoirs", file)
	base := "http://" + m[1]
	var views []server.ReservoirView
	reservoirs := func() []server.ReservoirView { t.Helper(); return getReservoirs(t, base, resAdminKey) }
	testbound.Until(t, "the reservoir full", func() bool { views = reservoirs(); return views[0].Stock == 2 })

	form := url.Values{"key": {resClientKey}, "method": {"turnstile"}, "sitekey": {resSitekey}, "pageurl": {"https://shop.example/checkout"}}
	id, err := inPHP(base, form)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get(base + "/res.php?" + url.Values{"key": {resClientKey}, "action": {"get"}, "id": {id}}.Encode())
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.HasPrefix(string(body), "OK|0.") {
		t.Fatalf("first res.php poll after the submit: %q, want OK|token", body)
	}
	views = reservoirs()
	if v := views[0]; len(views) != 1 || v.Name != "checkout" || v.Hits != 1 || v.HandedOut != 1 || v.Misses != 0 || v.Solved < 2 || v.Size != float64(2) {
		t.Errorf("GET /v1/reservoirs after the hit: %+v, want checkout: 1 hit, 1 handed out, 2 or more solved", views)
	}

	if err := os.WriteFile(file, []byte(reservoirsFile("checkout", "login")), 0o600); err != nil {
		t.Fatal(err)
	}
	p.cmd.Process.Signal(syscall.SIGHUP)
	testbound.Until(t, "login added at SIGHUP", func() bool { views = reservoirs(); return len(views) == 2 })
	if views[0].Name != "checkout" || views[0].Hits != 1 || views[1].Name != "login" {
		t.Errorf("after SIGHUP: %+v, want checkout (its hit kept) and login", views)
	}
	if err := os.WriteFile(file, []byte(`[{"name":"checkout","method":"turnstile","sitekey":"x"}]`), 0o600); err != nil {
		t.Fatal(err)
	}
	p.cmd.Process.Signal(syscall.SIGHUP)
	testbound.Until(t, "the bad file refused", func() bool {
		return strings.Contains(p.output(), `SIGHUP: the reservoirs file cannot be used; keeping the last good reservoirs`)
	})
	if !strings.Contains(p.output(), `unknown field \"sitekey\"`) {
		t.Errorf("the log of the bad file does not name its field:\n%s", p.output())
	}
	if views = reservoirs(); len(views) != 2 {
		t.Errorf("after a bad file: %+v, want checkout and login kept", views)
	}
	p.stop(t)
}

// serve refuses --reservoirs with --amqp (a gateway keeps no tokens), and
// a reservoirs file it cannot use, naming the file and the field.
func TestServeReservoirsRefused(t *testing.T) {
	t.Parallel()
	clients := writeFile(t, "clients.json", `[{"name":"qa","key":"`+resClientKey+`"}]`)
	bad := writeFile(t, "reservoirs.json", `[{"name":"a","method":"turnstile","size":0}]`)
	past := writeFile(t, "past.json", `[{"name":"a","method":"turnstile","params":{"sitekey":"k","pageurl":"https://a.example/"},"min_life":"10m"}]`)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--amqp", "amqp://127.0.0.1", "--reservoirs", bad}, "--reservoirs: applies to the local queue; with --amqp the gateway has no queue"},
		{[]string{"--store", "memory", "--reservoirs", bad}, "--reservoirs: reservoirs file " + bad + `: [0].size: 0: give "auto"`},
		{[]string{"--store", "memory", "--reservoirs", past}, "Reservoirs[0].MinLife: must be 0 (default 1m15s) or more and less than the token's lifetime 5m0s, got 10m0s (Reservoirs[N] is entry [N] of --reservoirs " + past + ")"},
	} {
		var out bytes.Buffer
		env := &environment{stdin: strings.NewReader(""), stdout: &out, stderr: &out, getenv: func(string) string { return "" }}
		args := append([]string{"serve", "--clients", clients, "--listen", "127.0.0.1:0"}, c.args...)
		if code := run(context.Background(), env, args); code != 2 || !strings.Contains(out.String(), c.want) {
			t.Errorf("serve %s: exit %d, want 2; output lacks %q:\n%s", strings.Join(c.args, " "), code, c.want, out.String())
		}
	}
}
