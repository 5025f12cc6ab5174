package tlsconf

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"time"
)

// The local CA's files in SelfSigned's directory.
const (
	CAFile   = "ca.pem"
	caKey    = "ca-key.pem"
	CertFile = "cert.pem"
	KeyFile  = "key.pem"
	lockFile = ".lock"
)

// CALife is the lifetime of the local CA SelfSigned makes, and of the
// server certificate it signs (which ends with it): short, as its key
// lies in a directory on disk and nothing revokes it. Both are made again
// when less than renewBefore is left.
const (
	CALife      = 90 * 24 * time.Hour
	renewBefore = 30 * 24 * time.Hour
)

// Local is what SelfSigned made or found.
type Local struct {
	// CA, Cert and Key are the files' paths: the CA certificate a client
	// trusts, the server's certificate and its key; CAKey the CA's key.
	CA, Cert, Key, CAKey string
	// MadeCA and MadeCert say what this call made (false: kept).
	MadeCA, MadeCert bool
}

// SelfSigned makes in dir, unless it is there already, a local CA and a
// server certificate it signed for hosts (names or IP addresses) and
// localhost, 127.0.0.1 and ::1. The CA lives CALife and is constrained
// to those names (X.509 name constraints, critical): its key, if taken,
// signs for no other site. A CA that does not cover hosts is made again,
// for its names and the new ones. Secrets are written 0600, the directory
// 0700; files are written whole and renamed into place, under a lock, so
// two processes starting at once make one CA.
func SelfSigned(dir string, hosts []string, now time.Time) (Local, error) {
	l := Local{CA: filepath.Join(dir, CAFile), Cert: filepath.Join(dir, CertFile), Key: filepath.Join(dir, KeyFile), CAKey: filepath.Join(dir, caKey)}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return l, fmt.Errorf("tls: local CA directory: %w", err)
	}
	unlock, err := lock(filepath.Join(dir, lockFile))
	if err != nil {
		return l, err
	}
	defer unlock()
	hosts = append(slices.DeleteFunc(slices.Clone(hosts), func(h string) bool { return h == "" }), "localhost", "127.0.0.1", "::1")
	ca, caSigner, err := readPair(l.CA, l.CAKey)
	if err != nil || now.Add(renewBefore).After(ca.NotAfter) || !ca.IsCA || !constrainedTo(ca, hosts, now) {
		names := hosts
		if err == nil && !now.Add(renewBefore).After(ca.NotAfter) {
			// A new host: the names the CA signed for stay signable.
			names = append(slices.Clone(hosts), ca.PermittedDNSDomains...)
			for _, r := range ca.PermittedIPRanges {
				names = append(names, r.IP.String())
			}
		}
		if ca, caSigner, err = makeCA(dir, names, now); err != nil {
			return l, err
		}
		l.MadeCA = true
	}
	leaf, _, err := readPair(l.Cert, l.Key)
	if err == nil && !l.MadeCA && leafGood(leaf, ca, hosts, now) {
		return l, nil
	}
	if err := makeLeaf(dir, ca, caSigner, hosts, now); err != nil {
		return l, err
	}
	l.MadeCert = true
	return l, nil
}

// lock takes an exclusive lock on path until the returned func is called.
func lock(path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("tls: local CA lock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("tls: local CA lock %s: %w", path, err)
	}
	return func() { f.Close() }, nil
}

// readPair reads a certificate and its key; an error when either is
// missing, unreadable or they do not match.
func readPair(certPath, keyPath string) (*x509.Certificate, crypto.Signer, error) {
	cb, err := os.ReadFile(certPath)
	if err != nil {
		return nil, nil, err
	}
	kb, err := os.ReadFile(keyPath)
	if err != nil {
		return nil, nil, err
	}
	cp, _ := pem.Decode(cb)
	kp, _ := pem.Decode(kb)
	if cp == nil || kp == nil {
		return nil, nil, errors.New("not PEM")
	}
	cert, err := x509.ParseCertificate(cp.Bytes)
	if err != nil {
		return nil, nil, err
	}
	key, err := x509.ParsePKCS8PrivateKey(kp.Bytes)
	if err != nil {
		return nil, nil, err
	}
	signer, ok := key.(crypto.Signer)
	if !ok {
		return nil, nil, errors.New("not a signing key")
	}
	pub, ok := signer.Public().(interface{ Equal(crypto.PublicKey) bool })
	if !ok || !pub.Equal(cert.PublicKey) {
		return nil, nil, errors.New("the key is not the certificate's")
	}
	return cert, signer, nil
}

// constrainedTo says whether ca is one SelfSigned makes now: no longer
// lived than CALife, with critical name constraints that permit each of
// hosts.
func constrainedTo(ca *x509.Certificate, hosts []string, now time.Time) bool {
	if ca.NotAfter.After(now.Add(CALife)) || !ca.PermittedDNSDomainsCritical ||
		len(ca.PermittedDNSDomains) == 0 || len(ca.PermittedIPRanges) == 0 {
		return false
	}
	for _, h := range hosts {
		ip := net.ParseIP(h)
		if ip == nil && !slices.Contains(ca.PermittedDNSDomains, h) {
			return false
		}
		if ip != nil && !slices.ContainsFunc(ca.PermittedIPRanges, func(n *net.IPNet) bool { return n.Contains(ip) }) {
			return false
		}
	}
	return true
}

// permitted splits hosts into the DNS names and IP addresses (one
// address each) of a name constraint, each once.
func permitted(hosts []string) (dns []string, ips []*net.IPNet) {
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			bits := 8 * net.IPv6len
			if ip4 := ip.To4(); ip4 != nil {
				ip, bits = ip4, 8*net.IPv4len
			}
			if !slices.ContainsFunc(ips, func(n *net.IPNet) bool { return n.IP.Equal(ip) }) {
				ips = append(ips, &net.IPNet{IP: ip, Mask: net.CIDRMask(bits, bits)})
			}
		} else if h != "" && !slices.Contains(dns, h) {
			dns = append(dns, h)
		}
	}
	return dns, ips
}

// leafGood says whether leaf is ca's, covers hosts and has time left.
func leafGood(leaf, ca *x509.Certificate, hosts []string, now time.Time) bool {
	if leaf.CheckSignatureFrom(ca) != nil || now.Add(renewBefore).After(leaf.NotAfter) || now.Before(leaf.NotBefore) {
		return false
	}
	for _, h := range hosts {
		if leaf.VerifyHostname(h) != nil {
			return false
		}
	}
	return true
}

// makeCA makes a CA of CALife constrained to hosts.
func makeCA(dir string, hosts []string, now time.Time) (*x509.Certificate, crypto.Signer, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	dns, ips := permitted(hosts)
	tmpl := &x509.Certificate{
		SerialNumber:                serial(),
		Subject:                     pkix.Name{CommonName: "captchaq local CA", Organization: []string{"captchaq"}},
		NotBefore:                   now.Add(-time.Hour),
		NotAfter:                    now.Add(CALife),
		IsCA:                        true,
		BasicConstraintsValid:       true,
		MaxPathLenZero:              true,
		KeyUsage:                    x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		PermittedDNSDomainsCritical: true,
		PermittedDNSDomains:         dns,
		PermittedIPRanges:           ips,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, err
	}
	if err := writePair(filepath.Join(dir, CAFile), filepath.Join(dir, caKey), der, key); err != nil {
		return nil, nil, err
	}
	return cert, key, nil
}

func makeLeaf(dir string, ca *x509.Certificate, caSigner crypto.Signer, hosts []string, now time.Time) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: hosts[0], Organization: []string{"captchaq"}},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     ca.NotAfter, // a leaf outliving its CA would not verify
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			if !slices.ContainsFunc(tmpl.IPAddresses, ip.Equal) {
				tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
			}
		} else if h != "" && !slices.Contains(tmpl.DNSNames, h) {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, key.Public(), caSigner)
	if err != nil {
		return err
	}
	return writePair(filepath.Join(dir, CertFile), filepath.Join(dir, KeyFile), der, key)
}

// writePair writes the key (0600) and then the certificate (0644), each
// whole and renamed into place.
func writePair(certPath, keyPath string, der []byte, key crypto.Signer) error {
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return err
	}
	if err := writeFile(keyPath, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		return err
	}
	return writeFile(certPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644)
}

func writeFile(path string, data []byte, mode fs.FileMode) error {
	f, err := os.CreateTemp(filepath.Dir(path), ".tmp-"+filepath.Base(path)+"-*")
	if err != nil {
		return fmt.Errorf("tls: %w", err)
	}
	defer os.Remove(f.Name())
	_, err = f.Write(data)
	if err == nil {
		err = f.Chmod(mode)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		return fmt.Errorf("tls: write %s: %w", path, err)
	}
	return nil
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	return n.Add(n, big.NewInt(1))
}

// Hosts are the names a self-signed certificate for a listen address
// (host:port) covers besides localhost: its host, or this machine's name
// when it listens on every address.
func Hosts(listen string) []string {
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		host = listen
	}
	if ip := net.ParseIP(host); host != "" && (ip == nil || !ip.IsUnspecified()) {
		return []string{host}
	}
	if name, err := os.Hostname(); err == nil && name != "" {
		return []string{name}
	}
	return nil
}
