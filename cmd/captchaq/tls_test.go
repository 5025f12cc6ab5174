package main

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"io"
	"math/big"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/captchaq/captchaq/internal/testbound"
	"github.com/captchaq/captchaq/internal/tlsconf"
	"github.com/captchaq/captchaq/sim"
)

// caPool is a pool holding the CA certificate in the PEM file path.
func caPool(t *testing.T, path string) *x509.CertPool {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		t.Fatalf("%s: no PEM certificate", path)
	}
	return pool
}

// certSerial is the serial of the PEM certificate in path.
func certSerial(t *testing.T, path string) *big.Int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(b)
	if block == nil {
		t.Fatalf("%s: not PEM", path)
	}
	c, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c.SerialNumber
}

// httpsClient trusts only pool; h2 false keeps it on HTTP/1.1.
func httpsClient(pool *x509.CertPool, h2 bool) *http.Client {
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, ForceAttemptHTTP2: h2}
	if !h2 {
		tr.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
	}
	return &http.Client{Transport: tr}
}

// get fetches u with c and returns the body and the protocol it came by.
func get(t *testing.T, c *http.Client, u string) (string, string) {
	t.Helper()
	resp, err := c.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return string(body), resp.Proto
}

var caLogRE = regexp.MustCompile(`msg="TLS with the local CA: clients trust it with its ca.pem" ca=(\S+) made_ca=(\w+)`)

// TestServeTLSSelfSigned: `serve --tls-self-signed` makes its CA in the
// data directory and logs where ca.pem is; a client that trusts it solves
// over HTTP/2 and HTTP/1.1 at https://localhost:PORT and reads /metrics
// over TLS with --metrics-tls; plain http on the TLS port gets no answer
// of the protocol; a second start keeps the CA.
func TestServeTLSSelfSigned(t *testing.T) {
	t.Parallel()
	bin := captchaqBinary(t)
	data := t.TempDir()
	_, apiURL := startFastSim(t, sim.Config{Key: "tls-provider-key"})
	clients := writeFile(t, "clients.json", `[{"name":"tls","key":"tls-client-key"}]`)
	start := func() (*process, string, string, string) {
		p, m := startProcess(t, bin, []string{"CAPTCHAAI_KEY=tls-provider-key", "XDG_DATA_HOME=" + data},
			regexp.MustCompile(`msg="serving metrics" addr=\S+ url=(https://\S+)/metrics\n?.*`),
			"serve", "--api-url", apiURL, "--clients", clients, "--store", "memory", "--listen", "127.0.0.1:0",
			"--tls-self-signed", "--metrics-listen", "127.0.0.1:0", "--metrics-tls", "--poll-interval", "50ms")
		var front string
		testbound.Until(t, "the serving line", func() bool {
			mm := regexp.MustCompile(`msg=serving addr=127\.0\.0\.1:(\d+) url=https://`).FindStringSubmatch(p.output())
			if mm != nil {
				front = "https://localhost:" + mm[1]
			}
			return mm != nil
		})
		ca := caLogRE.FindStringSubmatch(p.output())
		if ca == nil {
			t.Fatalf("no CA line:\n%s", p.output())
		}
		return p, front, m[1], ca[1] + " made_ca=" + ca[2]
	}
	p, front, metrics, ca := start()
	caPath := filepath.Join(data, "captchaq", "tls", "ca.pem")
	if ca != caPath+" made_ca=true" {
		t.Fatalf("CA line %q, want %s made_ca=true", ca, caPath)
	}
	for name, want := range map[string]os.FileMode{"ca-key.pem": 0o600, "key.pem": 0o600} {
		if fi, err := os.Stat(filepath.Join(data, "captchaq", "tls", name)); err != nil || fi.Mode().Perm() != want {
			t.Fatalf("%s: %v %v, want mode %o", name, fi, err, want)
		}
	}
	pool := caPool(t, caPath)
	for _, h2 := range []bool{true, false} {
		c := httpsClient(pool, h2)
		body, proto := get(t, c, front+"/in.php?key=tls-client-key&method=turnstile&sitekey=0x4AAAAAAAC3DHQFLr1GavRN&pageurl="+url.QueryEscape("https://shop.example/login"))
		id, ok := strings.CutPrefix(body, "OK|")
		if wantProto := map[bool]string{true: "HTTP/2.0", false: "HTTP/1.1"}[h2]; !ok || proto != wantProto {
			t.Fatalf("in.php over %s: %q, want OK|id over %s", proto, body, wantProto)
		}
		var answer string
		testbound.Until(t, "the answer over TLS", func() bool {
			answer, _ = get(t, c, front+"/res.php?key=tls-client-key&action=get&id="+id)
			return answer != "CAPCHA_NOT_READY"
		})
		if !strings.HasPrefix(answer, "OK|0.") {
			t.Fatalf("res.php: %q, want OK|<turnstile token>", answer)
		}
	}
	if body, _ := get(t, httpsClient(pool, true), metrics+"/metrics"); !strings.Contains(body, "captchaq_tasks_submitted_total") {
		t.Fatalf("/metrics over TLS: %.300s", body)
	}
	// Plain http on the TLS port: Go's TLS server answers 400 with a
	// message, never the protocol.
	if body, _ := get(t, http.DefaultClient, strings.Replace(front, "https://localhost", "http://127.0.0.1", 1)+"/res.php?key=tls-client-key&action=getbalance"); strings.Contains(body, "15") {
		t.Fatalf("plain http answered %q", body)
	}
	// A client that does not trust the CA is refused.
	if _, err := http.Get(front + "/res.php"); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("a client without the CA: %v, want a certificate error", err)
	}
	p.stop(t)
	serial := certSerial(t, caPath)
	_, _, _, ca = start()
	if ca != caPath+" made_ca=false" || certSerial(t, caPath).Cmp(serial) != 0 {
		t.Fatalf("second start: CA line %q, want the CA kept", ca)
	}
}

// TestServeTLSCertRotation: `serve --tls-cert --tls-key` serves a new pair
// written over the files from the next connection on, and reads them
// again on SIGHUP (the process lives on); a broken pair is reported and
// the last good one served.
func TestServeTLSCertRotation(t *testing.T) {
	t.Parallel()
	bin := captchaqBinary(t)
	caDir, dir := t.TempDir(), t.TempDir()
	l, err := tlsconf.SelfSigned(caDir, nil, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	install := func() *big.Int {
		t.Helper()
		for from, to := range map[string]string{l.Cert: certFile, l.Key: keyFile} {
			b, err := os.ReadFile(from)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(to, b, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		return certSerial(t, l.Cert)
	}
	first := install()
	_, apiURL := startFastSim(t, sim.Config{Key: "rot-provider-key"})
	clients := writeFile(t, "clients.json", `[{"name":"rot","key":"rot-client-key"}]`)
	p, m := startProcess(t, bin, []string{"CAPTCHAAI_KEY=rot-provider-key"}, regexp.MustCompile(`msg=serving addr=127\.0\.0\.1:(\d+) url=https://`),
		"serve", "--api-url", apiURL, "--clients", clients, "--store", "memory", "--listen", "127.0.0.1:0", "--tls-cert", certFile, "--tls-key", keyFile)
	addr := "localhost:" + m[1]
	pool := caPool(t, l.CA)
	served := func() *big.Int {
		t.Helper()
		conn, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: pool})
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		return conn.ConnectionState().PeerCertificates[0].SerialNumber
	}
	if s := served(); s.Cmp(first) != 0 {
		t.Fatalf("serial %v, want %v", s, first)
	}
	// A new pair written over the files (same paths, same inodes).
	if _, err := tlsconf.SelfSigned(caDir, []string{"second.example"}, time.Now()); err != nil {
		t.Fatal(err)
	}
	// A host the CA's name constraints leave out makes a new CA (for the
	// old names and the new): the client trusts that one now.
	pool = caPool(t, l.CA)
	second := install()
	if s := served(); s.Cmp(second) != 0 {
		t.Fatalf("after the files changed: serial %v, want %v", s, second)
	}
	// SIGHUP reads them again; the process is not ended by it.
	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	testbound.Until(t, "the SIGHUP reload", func() bool { return strings.Contains(p.output(), "SIGHUP: TLS certificate reloaded") })
	if s := served(); s.Cmp(second) != 0 {
		t.Fatalf("after SIGHUP: serial %v, want %v", s, second)
	}
	// A key that is not the certificate's: the last good pair stays.
	other, err := tlsconf.SelfSigned(t.TempDir(), nil, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(other.Key)
	if err := os.WriteFile(keyFile, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if s := served(); s.Cmp(second) != 0 {
		t.Fatalf("with a mismatched key: serial %v, want the last good %v", s, second)
	}
	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	testbound.Until(t, "the refused SIGHUP reload", func() bool {
		return strings.Contains(p.output(), "SIGHUP: the TLS certificate files cannot be used; serving the last good pair")
	})
	if s := served(); s.Cmp(second) != 0 {
		t.Fatalf("after a refused SIGHUP: serial %v, want %v", s, second)
	}
	p.stop(t)
}

// TestSimTLS: `captchaq sim --tls-self-signed` serves https and logs its
// CA; the provider client trusts it through SSL_CERT_FILE (here, a pool).
func TestSimTLS(t *testing.T) {
	t.Parallel()
	bin := captchaqBinary(t)
	data := t.TempDir()
	p, m := startProcess(t, bin, []string{"XDG_DATA_HOME=" + data}, regexp.MustCompile(`listening on https://127\.0\.0\.1:(\d+)`),
		"sim", "--addr", "127.0.0.1:0", "--key", "sim-tls-key", "--balance", "9.5", "--tls-self-signed")
	ca := caLogRE.FindStringSubmatch(p.output())
	if ca == nil {
		t.Fatalf("no CA line:\n%s", p.output())
	}
	body, proto := get(t, httpsClient(caPool(t, ca[1]), true), "https://localhost:"+m[1]+"/res.php?key=sim-tls-key&action=getbalance")
	if body != "9.5" || proto != "HTTP/2.0" {
		t.Fatalf("getbalance: %q over %s, want 9.5 over HTTP/2.0", body, proto)
	}
}

// TestTLSFlagErrors: the flags refuse what cannot work, exit 2.
func TestTLSFlagErrors(t *testing.T) {
	t.Parallel()
	clients := writeFile(t, "clients.json", `[{"name":"x","key":"flag-client-key"}]`)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"serve", "--clients", clients, "--tls-cert", "c.pem"}, "--tls-cert and --tls-key: give both"},
		{[]string{"serve", "--clients", clients, "--tls-self-signed", "--tls-key", "k.pem"}, "--tls-self-signed: give it alone"},
		{[]string{"serve", "--clients", clients, "--metrics-tls"}, "--metrics-tls: give it with --metrics-listen"},
		{[]string{"serve", "--clients", clients, "--tls-cert", "missing.pem", "--tls-key", "missing-key.pem"}, "missing.pem"},
		{[]string{"sim", "--tls-cert", "c.pem"}, "--tls-cert and --tls-key: give both"},
	} {
		r := runWith(t, "", map[string]string{"CAPTCHAAI_KEY": "x"}, tc.args...)
		if r.code != 2 || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want 2 and %q", tc.args, r.code, r.stderr, tc.want)
		}
	}
}

// TestWorkerMetricsTLS: `worker --metrics-addr --tls-self-signed` serves
// /metrics over https with a certificate of the local CA.
func TestWorkerMetricsTLS(t *testing.T) {
	t.Parallel()
	f := newProcessFleet(t, "test-wm-tls-", sim.Config{Key: "wm-provider-key", LatencyScale: 0.01, PollBan: sim.PollBan{Disabled: true}})
	const owner = "wm-tls-worker"
	f.mu.Lock()
	f.owners = append(f.owners, owner)
	f.mu.Unlock()
	data := t.TempDir()
	p, m := startProcess(t, f.bin, []string{"CAPTCHAAI_KEY=wm-provider-key", "XDG_DATA_HOME=" + data},
		regexp.MustCompile(`msg="serving metrics" addr=\S+ url=(https://127\.0\.0\.1:\d+)/metrics`),
		"worker", "--amqp", f.brokerURL, "--prefix", f.prefix, "--api-url", f.apiURL, "--threads", "2", "--owner", owner,
		"--metrics-addr", "127.0.0.1:0", "--tls-self-signed")
	body, proto := get(t, httpsClient(caPool(t, filepath.Join(data, "captchaq", "tls", "ca.pem")), true), m[1]+"/metrics")
	if !strings.Contains(body, "captchaq_worker_tasks_held") || proto != "HTTP/2.0" {
		t.Fatalf("/metrics over TLS (%s): %.300s", proto, body)
	}
	p.stop(t)
}

// A worker's --metrics-addr off loopback is named at start with the fix,
// as serve's --metrics-listen is: its /metrics needs no key.
func TestWorkerMetricsOffLoopbackWarns(t *testing.T) {
	t.Parallel()
	f := newProcessFleet(t, "test-wm-warn-", sim.Config{Key: "wm-provider-key", LatencyScale: 0.01, PollBan: sim.PollBan{Disabled: true}})
	const owner = "wm-warn-worker"
	f.mu.Lock()
	f.owners = append(f.owners, owner)
	f.mu.Unlock()
	p, _ := startProcess(t, f.bin, []string{"CAPTCHAAI_KEY=wm-provider-key"},
		regexp.MustCompile(`msg="serving metrics" addr=\S+`),
		"worker", "--amqp", f.brokerURL, "--prefix", f.prefix, "--api-url", f.apiURL, "--threads", "2", "--owner", owner,
		"--metrics-addr", "0.0.0.0:0")
	if want := `level=WARN msg="` + workerMetricsExposed + `" addr=`; !strings.Contains(p.output(), want) {
		t.Errorf("worker output lacks %q:\n%s", want, p.output())
	}
	p.stop(t)
}
