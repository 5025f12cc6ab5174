package tlsconf_test

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/captchaq/captchaq/internal/testbound"
	"github.com/captchaq/captchaq/internal/tlsconf"
)

var start = time.Date(2027, 1, 10, 12, 0, 0, 0, time.UTC)

func mode(t *testing.T, path string) os.FileMode {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Mode().Perm()
}

func readCert(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	block, rest := pem.Decode(b)
	if block == nil || block.Type != "CERTIFICATE" || len(bytes.TrimSpace(rest)) != 0 {
		t.Fatalf("%s: not one PEM certificate", path)
	}
	c, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func poolOf(t *testing.T, caPath string) *x509.CertPool {
	t.Helper()
	pool := x509.NewCertPool()
	pool.AddCert(readCert(t, caPath))
	return pool
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestSelfSignedOnceThenKept: the first call makes a CA and a server
// certificate (secrets 0600, directory 0700) that verify for the hosts,
// localhost and the loopback addresses; the next keeps both; a new host
// or a certificate near its end makes a new server certificate under the
// same CA; a CA near its end makes both again.
func TestSelfSignedOnceThenKept(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "tls")
	l, err := tlsconf.SelfSigned(dir, []string{"gw.example", "10.1.2.3", ""}, start)
	if err != nil {
		t.Fatal(err)
	}
	if !l.MadeCA || !l.MadeCert {
		t.Fatalf("first call made CA %v, cert %v: want both", l.MadeCA, l.MadeCert)
	}
	if m := mode(t, dir); m != 0o700 {
		t.Errorf("directory mode %o, want 700", m)
	}
	for name, want := range map[string]os.FileMode{"ca.pem": 0o644, "ca-key.pem": 0o600, "cert.pem": 0o644, "key.pem": 0o600} {
		if m := mode(t, filepath.Join(dir, name)); m != want {
			t.Errorf("%s mode %o, want %o", name, m, want)
		}
	}
	ca, leaf := readCert(t, l.CA), readCert(t, l.Cert)
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	for _, h := range []string{"gw.example", "10.1.2.3", "localhost", "127.0.0.1", "::1"} {
		if _, err := leaf.Verify(x509.VerifyOptions{DNSName: h, Roots: pool, CurrentTime: start, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
			t.Errorf("certificate for %s: %v", h, err)
		}
	}
	if _, err := leaf.Verify(x509.VerifyOptions{DNSName: "other.example", Roots: pool, CurrentTime: start}); err == nil {
		t.Error("certificate verifies for a host it was not made for")
	}
	if !ca.IsCA || ca.MaxPathLen != 0 || !ca.MaxPathLenZero {
		t.Errorf("CA: IsCA %v MaxPathLen %d zero %v", ca.IsCA, ca.MaxPathLen, ca.MaxPathLenZero)
	}

	again, err := tlsconf.SelfSigned(dir, []string{"gw.example", "10.1.2.3"}, start.Add(24*time.Hour))
	if err != nil || again.MadeCA || again.MadeCert {
		t.Fatalf("second call: %+v %v, want both kept", again, err)
	}
	if readCert(t, l.Cert).SerialNumber.Cmp(leaf.SerialNumber) != 0 {
		t.Fatal("the kept certificate changed")
	}

	// A new host: the CA's name constraints do not permit it, so both are
	// made again, the CA for the old names and the new one.
	newHost, err := tlsconf.SelfSigned(dir, []string{"other.example"}, start.Add(48*time.Hour))
	if err != nil || !newHost.MadeCA || !newHost.MadeCert {
		t.Fatalf("new host: %+v %v, want a new CA and certificate", newHost, err)
	}
	ca2 := readCert(t, l.CA)
	if err := readCert(t, l.Cert).CheckSignatureFrom(ca2); err != nil {
		t.Fatalf("new certificate not signed by the new CA: %v", err)
	}
	if got := strings.Join(ca2.PermittedDNSDomains, " "); got != "other.example localhost gw.example" {
		t.Errorf("new CA permits %q", got)
	}
	// Back to the first host: permitted, the CA is kept.
	back, err := tlsconf.SelfSigned(dir, []string{"gw.example"}, start.Add(72*time.Hour))
	if err != nil || back.MadeCA || !back.MadeCert {
		t.Fatalf("first host again: %+v %v, want the CA kept, a new certificate", back, err)
	}

	// Less than 30 days left of the CA's (and the certificate's) 90: both
	// again, for the names asked for only.
	late := start.Add(65 * 24 * time.Hour)
	both, err := tlsconf.SelfSigned(dir, []string{"other.example"}, late)
	if err != nil || !both.MadeCA || !both.MadeCert {
		t.Fatalf("near its end: %+v %v, want both made again", both, err)
	}
	if na := readCert(t, l.Cert).NotAfter; !na.Equal(readCert(t, l.CA).NotAfter) || na.Before(late.Add(89*24*time.Hour)) {
		t.Errorf("renewed certificate ends %v", na)
	}
	if got := strings.Join(readCert(t, l.CA).PermittedDNSDomains, " "); got != "other.example localhost" {
		t.Errorf("renewed CA permits %q", got)
	}
}

// TestSelfSignedConcurrentStarts: processes starting at once (here
// goroutines, through the same file lock) end with one CA that signed the
// certificate on disk.
func TestSelfSignedConcurrentStarts(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	var wg sync.WaitGroup
	made := make(chan bool, 8)
	for range 8 {
		wg.Go(func() {
			l, err := tlsconf.SelfSigned(dir, []string{"localhost"}, start)
			if err != nil {
				t.Error(err)
			}
			made <- l.MadeCA
		})
	}
	wg.Wait()
	close(made)
	n := 0
	for m := range made {
		if m {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("%d calls made a CA, want 1", n)
	}
	if err := readCert(t, filepath.Join(dir, "cert.pem")).CheckSignatureFrom(readCert(t, filepath.Join(dir, "ca.pem"))); err != nil {
		t.Fatal(err)
	}
}

// serveTLS serves "hello" over TLS with c until the test ends and
// returns the address.
func serveTLS(t *testing.T, c *tlsconf.Cert) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{
		Handler:           http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, r.Proto) }),
		TLSConfig:         tlsconf.Config(c),
		ReadHeaderTimeout: 10 * time.Second,
	}
	go hs.ServeTLS(ln, "", "")
	t.Cleanup(func() { hs.Close() })
	return ln.Addr().String()
}

// served is the serial of the certificate a handshake with addr gets.
func served(t *testing.T, addr string, pool *x509.CertPool) *big.Int {
	t.Helper()
	conn, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: pool, ServerName: "localhost"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0].SerialNumber
}

// TestCertReloadsChangedFiles: a pair renamed into place is served from
// the next handshake; a broken pair is reported and the last good one
// kept; Reload reads at once and says what is wrong.
func TestCertReloadsChangedFiles(t *testing.T) {
	t.Parallel()
	caDir, dir := t.TempDir(), t.TempDir()
	first, err := tlsconf.SelfSigned(caDir, nil, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	certPath, keyPath := filepath.Join(dir, "c.pem"), filepath.Join(dir, "k.pem")
	copyFile(t, first.Cert, certPath)
	copyFile(t, first.Key, keyPath)
	var logs testbound.Buffer
	c, err := tlsconf.Load(certPath, keyPath, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	pool := poolOf(t, first.CA)
	addr := serveTLS(t, c)
	s1 := served(t, addr, pool)
	if s1.Cmp(readCert(t, first.Cert).SerialNumber) != 0 {
		t.Fatal("not serving the loaded certificate")
	}

	// Rotate: a new certificate under the same CA, renamed into place.
	must(t, os.Remove(first.Cert))
	if l, err := tlsconf.SelfSigned(caDir, nil, time.Now()); err != nil || l.MadeCA || !l.MadeCert {
		t.Fatalf("a new certificate under the same CA: %+v %v", l, err)
	}
	copyFile(t, first.Key, keyPath+".new")
	copyFile(t, first.Cert, certPath+".new")
	must(t, os.Rename(keyPath+".new", keyPath))
	must(t, os.Rename(certPath+".new", certPath))
	s2 := served(t, addr, pool)
	if s2.Cmp(s1) == 0 || s2.Cmp(readCert(t, first.Cert).SerialNumber) != 0 {
		t.Fatalf("after the rotation: serial %v, want the new %v", s2, readCert(t, first.Cert).SerialNumber)
	}
	if !strings.Contains(logs.String(), "TLS certificate reloaded") {
		t.Errorf("no reload logged: %s", logs.String())
	}

	// Half a rotation: a key that is not the certificate's.
	other, err := tlsconf.SelfSigned(t.TempDir(), nil, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	copyFile(t, other.Key, keyPath+".new")
	must(t, os.Rename(keyPath+".new", keyPath))
	if s := served(t, addr, pool); s.Cmp(s2) != 0 {
		t.Fatalf("with a mismatched key: serial %v, want the last good %v", s, s2)
	}
	if !strings.Contains(logs.String(), "cannot be used; serving the last good pair") {
		t.Errorf("the broken pair was not reported: %s", logs.String())
	}
	if err := c.Reload(); err == nil || !strings.Contains(err.Error(), "k.pem") {
		t.Errorf("Reload of a mismatched pair: %v, want an error naming the key file", err)
	}
	if s := served(t, addr, pool); s.Cmp(s2) != 0 {
		t.Fatalf("after a failed Reload: serial %v, want %v", s, s2)
	}
	// The rest of the rotation arrives: served at once.
	copyFile(t, other.Cert, certPath+".new")
	must(t, os.Rename(certPath+".new", certPath))
	if s := served(t, addr, poolOf(t, other.CA)); s.Cmp(readCert(t, other.Cert).SerialNumber) != 0 {
		t.Fatalf("after the whole rotation: serial %v, want %v", s, readCert(t, other.Cert).SerialNumber)
	}
}

// TestConfigVersionsAndProtocols: TLS 1.1 is refused; HTTP/2 and
// HTTP/1.1 are both served over TLS 1.2 and 1.3.
func TestConfigVersionsAndProtocols(t *testing.T) {
	t.Parallel()
	l, err := tlsconf.SelfSigned(t.TempDir(), nil, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	c, err := tlsconf.Load(l.Cert, l.Key, nil)
	if err != nil {
		t.Fatal(err)
	}
	addr := serveTLS(t, c)
	pool := poolOf(t, l.CA)
	if _, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: pool, ServerName: "localhost", MinVersion: tls.VersionTLS10, MaxVersion: tls.VersionTLS11}); err == nil {
		t.Error("a TLS 1.1 handshake succeeded")
	}
	for _, tc := range []struct {
		version   uint16
		h2        bool
		wantProto string
	}{
		{tls.VersionTLS12, true, "HTTP/2.0"},
		{tls.VersionTLS12, false, "HTTP/1.1"},
		{tls.VersionTLS13, true, "HTTP/2.0"},
		{tls.VersionTLS13, false, "HTTP/1.1"},
	} {
		tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MaxVersion: tc.version}, ForceAttemptHTTP2: tc.h2}
		if !tc.h2 {
			tr.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
		}
		resp, err := (&http.Client{Transport: tr}).Get("https://" + strings.Replace(addr, "127.0.0.1", "localhost", 1))
		if err != nil {
			t.Fatalf("TLS %x h2 %v: %v", tc.version, tc.h2, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		tr.CloseIdleConnections()
		if string(body) != tc.wantProto || resp.TLS.Version != tc.version {
			t.Errorf("TLS %x h2 %v: served %s over %x, want %s", tc.version, tc.h2, body, resp.TLS.Version, tc.wantProto)
		}
	}
}

func TestLoadErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if _, err := tlsconf.Load("", filepath.Join(dir, "k"), nil); err == nil || !strings.Contains(err.Error(), "both") {
		t.Errorf("no certificate file: %v", err)
	}
	if _, err := tlsconf.Load(filepath.Join(dir, "missing.pem"), filepath.Join(dir, "k"), nil); !errors.Is(err, os.ErrNotExist) || !strings.Contains(err.Error(), "missing.pem") {
		t.Errorf("missing file: %v, want not-exist naming it", err)
	}
	must(t, os.WriteFile(filepath.Join(dir, "c.pem"), []byte("not pem"), 0o600))
	must(t, os.WriteFile(filepath.Join(dir, "k.pem"), []byte("not pem"), 0o600))
	if _, err := tlsconf.Load(filepath.Join(dir, "c.pem"), filepath.Join(dir, "k.pem"), nil); err == nil || !strings.Contains(err.Error(), "give a PEM certificate") {
		t.Errorf("not PEM: %v", err)
	}
}

func TestHosts(t *testing.T) {
	t.Parallel()
	name, _ := os.Hostname()
	for listen, want := range map[string]string{"127.0.0.1:8080": "127.0.0.1", "gw.example:443": "gw.example", "[::1]:1": "::1", "0.0.0.0:8080": name, ":8080": name, "[::]:1": name} {
		if got := tlsconf.Hosts(listen); len(got) != 1 || got[0] != want {
			t.Errorf("Hosts(%q) = %v, want [%s]", listen, got, want)
		}
	}
}

// TestSelfSignedCAIsShortLivedAndNameConstrained: the local CA lives 90
// days, not ten years, and its key signs for the hosts it serves only: a
// certificate it signs for another name or address fails verification. A
// CA of the old kind (long-lived, unconstrained) is replaced.
func TestSelfSignedCAIsShortLivedAndNameConstrained(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	l, err := tlsconf.SelfSigned(dir, []string{"gw.example", "10.1.2.3"}, start)
	if err != nil {
		t.Fatal(err)
	}
	ca := readCert(t, l.CA)
	if want := start.Add(90 * 24 * time.Hour); !ca.NotAfter.Equal(want) {
		t.Errorf("CA ends %v, want %v (90 days)", ca.NotAfter, want)
	}
	var ips []string
	for _, n := range ca.PermittedIPRanges {
		ips = append(ips, n.String())
	}
	if dns := strings.Join(ca.PermittedDNSDomains, " "); !ca.PermittedDNSDomainsCritical || dns != "gw.example localhost" ||
		strings.Join(ips, " ") != "10.1.2.3/32 127.0.0.1/32 ::1/128" {
		t.Errorf("CA name constraints: critical %v, DNS %q, IP %q", ca.PermittedDNSDomainsCritical, dns, ips)
	}
	caKey := readKey(t, l.CAKey)
	pool := poolOf(t, l.CA)
	for _, c := range []struct {
		dns, ip string
		ok      bool
	}{
		{"gw.example", "", true}, {"localhost", "", true}, {"", "10.1.2.3", true},
		{"bank.example", "", false}, {"", "10.9.9.9", false}, {"", "192.0.2.1", false},
	} {
		leaf := signLeaf(t, ca, caKey, c.dns, c.ip)
		host := c.dns + c.ip
		_, err := leaf.Verify(x509.VerifyOptions{DNSName: host, Roots: pool, CurrentTime: start})
		var ce x509.CertificateInvalidError
		switch {
		case c.ok && err != nil:
			t.Errorf("a certificate for %s, a host served: %v", host, err)
		case !c.ok && (!errors.As(err, &ce) || ce.Reason != x509.CANotAuthorizedForThisName):
			t.Errorf("a certificate for %s, no host served: %v, want CANotAuthorizedForThisName", host, err)
		}
	}

	// A CA made by an older version: ten years, no constraints.
	old := t.TempDir()
	oldCA := writeOldCA(t, old)
	again, err := tlsconf.SelfSigned(old, []string{"gw.example"}, start)
	if err != nil || !again.MadeCA || !again.MadeCert {
		t.Fatalf("an unconstrained ten-year CA: %+v %v, want it replaced", again, err)
	}
	if ca := readCert(t, again.CA); ca.SerialNumber.Cmp(oldCA) == 0 || len(ca.PermittedDNSDomains) == 0 {
		t.Errorf("the old CA is still there: serial %v, permits %q", ca.SerialNumber, ca.PermittedDNSDomains)
	}
}

func readKey(t *testing.T, path string) crypto.Signer {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(b)
	if block == nil {
		t.Fatalf("%s: not PEM", path)
	}
	k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return k.(crypto.Signer)
}

// signLeaf is what a thief of the CA's key would sign: a server
// certificate for dns or ip.
func signLeaf(t *testing.T, ca *x509.Certificate, caKey crypto.Signer, dns, ip string) *x509.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(7), NotBefore: start.Add(-time.Hour), NotAfter: start.Add(24 * time.Hour),
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	if dns != "" {
		tmpl.DNSNames = []string{dns}
	}
	if ip != "" {
		tmpl.IPAddresses = []net.IP{net.ParseIP(ip)}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, key.Public(), caKey)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return leaf
}

// writeOldCA writes in dir a CA as SelfSigned made it before: ten years,
// no name constraints. It returns its serial.
func writeOldCA(t *testing.T, dir string) *big.Int {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(42), Subject: pkix.Name{CommonName: "captchaq local CA"},
		NotBefore: start.Add(-time.Hour), NotAfter: start.Add(10 * 365 * 24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, MaxPathLenZero: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	must(t, os.WriteFile(filepath.Join(dir, "ca.pem"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644))
	must(t, os.WriteFile(filepath.Join(dir, "ca-key.pem"), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}), 0o600))
	return tmpl.SerialNumber
}
