package tlsconf

import (
	"bytes"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"
)

// Cert is a certificate and key pair read from files, read again when
// the files change (seen at the next handshake) or on Reload. Its methods
// are safe for concurrent use.
type Cert struct {
	certFile, keyFile string
	log               *slog.Logger

	mu   sync.Mutex
	cert *tls.Certificate
	// The files last read, good or not: their stats, bytes and when.
	seen   [2]os.FileInfo
	data   [2][]byte
	readAt time.Time
}

// racyWindow: a file changed this soon before it was read may change
// again with the same size and time stamp (file times are coarser than
// writes), so until it is older its bytes are compared, as git does for a
// racily clean index.
const racyWindow = 2 * time.Second

// Load reads the pair; log (nil: discarded) hears of later reloads and of
// pairs that could not be read.
func Load(certFile, keyFile string, log *slog.Logger) (*Cert, error) {
	if certFile == "" || keyFile == "" {
		return nil, errors.New("tls: give both a certificate file and its key file (PEM)")
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	c := &Cert{certFile: certFile, keyFile: keyFile, log: log}
	if err := c.Reload(); err != nil {
		return nil, err
	}
	return c, nil
}

// Reload reads the files now. On an error the pair served so far stays.
func (c *Cert) Reload() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	st, data, err := c.readFiles()
	if err != nil {
		return err
	}
	return c.use(st, data)
}

// readFiles stats and reads both files.
func (c *Cert) readFiles() ([2]os.FileInfo, [2][]byte, error) {
	var (
		st   [2]os.FileInfo
		data [2][]byte
		err  error
	)
	for i, name := range []string{c.certFile, c.keyFile} {
		if st[i], err = os.Stat(name); err != nil {
			return st, data, fmt.Errorf("tls: %w", err)
		}
		if data[i], err = os.ReadFile(name); err != nil {
			return st, data, fmt.Errorf("tls: %w", err)
		}
	}
	return st, data, nil
}

// use parses the pair read; c.mu is held.
func (c *Cert) use(st [2]os.FileInfo, data [2][]byte) error {
	c.seen, c.data, c.readAt = st, data, time.Now()
	pair, err := tls.X509KeyPair(data[0], data[1])
	if err != nil {
		return fmt.Errorf("tls: certificate %s with key %s: %w (give a PEM certificate and the PEM key it was made for)", c.certFile, c.keyFile, err)
	}
	c.cert = &pair
	return nil
}

// GetCertificate is crypto/tls's hook: the current pair, read again first
// when either file changed since it was last read (or may have: see
// racyWindow).
func (c *Cert) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.mayHaveChanged() {
		return c.cert, nil
	}
	st, data, err := c.readFiles()
	switch {
	case err != nil:
		// Gone or unreadable for a moment (a rotation): keep serving.
	case bytes.Equal(data[0], c.data[0]) && bytes.Equal(data[1], c.data[1]):
		c.seen, c.readAt = st, time.Now()
	default:
		if err := c.use(st, data); err != nil {
			c.log.Warn("the changed TLS certificate files cannot be used; serving the last good pair", "err", err)
		} else {
			c.log.Info("TLS certificate reloaded", "cert", c.certFile)
		}
	}
	return c.cert, nil
}

// mayHaveChanged says whether a file is not the one last read: another
// file (renamed into place), one written since, or one written so close
// to the last reading that its stat cannot tell.
func (c *Cert) mayHaveChanged() bool {
	for i, name := range []string{c.certFile, c.keyFile} {
		now, err := os.Stat(name)
		if err != nil {
			return false
		}
		before := c.seen[i]
		if !os.SameFile(now, before) || !now.ModTime().Equal(before.ModTime()) || now.Size() != before.Size() ||
			!now.ModTime().Before(c.readAt.Add(-racyWindow)) {
			return true
		}
	}
	return false
}

// MinVersion is the oldest protocol version served.
const MinVersion = tls.VersionTLS12

// Config is a server's TLS configuration for c: TLS 1.2 or newer, the
// certificate from c at each handshake. net/http's ServeTLS adds HTTP/2.
func Config(c *Cert) *tls.Config {
	return &tls.Config{MinVersion: MinVersion, GetCertificate: c.GetCertificate}
}
