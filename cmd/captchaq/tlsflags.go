package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/captchaq/captchaq/internal/tlsconf"
)

// tlsFlags are a listener's TLS flags: certificate files, or the local CA.
type tlsFlags struct {
	cert, key  *string
	selfSigned *bool
}

// addTLSFlags adds --tls-cert, --tls-key and --tls-self-signed; what names
// the listener they serve.
func addTLSFlags(fs *flag.FlagSet, what string) *tlsFlags {
	return &tlsFlags{
		cert:       fs.String("tls-cert", "", "serve "+what+" over TLS (https) with this PEM certificate `FILE` (the chain, leaf first); read again on SIGHUP or when the file changes"),
		key:        fs.String("tls-key", "", "the PEM private key `FILE` of --tls-cert"),
		selfSigned: fs.Bool("tls-self-signed", false, "serve "+what+" over TLS with a certificate from a local CA made once in the data directory (tls/ca.pem: give it to clients, e.g. NODE_EXTRA_CA_CERTS, REQUESTS_CA_BUNDLE, SSL_CERT_FILE); for local use and tests"),
	}
}

// on says whether any TLS flag was given.
func (f *tlsFlags) on() bool { return *f.cert != "" || *f.key != "" || *f.selfSigned }

// tlsDir is where --tls-self-signed keeps its CA.
func tlsDir() (string, error) {
	dir, err := dataDir()
	if err != nil {
		return "", fmt.Errorf("--tls-self-signed: no data directory (%v); give --tls-cert and --tls-key instead", err)
	}
	return filepath.Join(dir, "tls"), nil
}

// config is the TLS configuration the flags ask for, nil without TLS.
// listen is the listener's address: the self-signed certificate covers
// its host. The certificate is read again on SIGHUP until ctx ends. A
// key file other users can read is named on env's stderr, with the fix,
// as the clients file is.
func (f *tlsFlags) config(ctx context.Context, env *environment, listen string, log *slog.Logger) (*tls.Config, error) {
	if !f.on() {
		return nil, nil
	}
	certFile, keyFile := *f.cert, *f.key
	switch {
	case *f.selfSigned && (certFile != "" || keyFile != ""):
		return nil, &exitError{code: 2, err: errors.New("--tls-self-signed: give it alone, or --tls-cert and --tls-key for a certificate of your own")}
	case !*f.selfSigned && (certFile == "" || keyFile == ""):
		return nil, &exitError{code: 2, err: errors.New("--tls-cert and --tls-key: give both (the certificate and its key, PEM), or --tls-self-signed")}
	case *f.selfSigned:
		dir, err := tlsDir()
		if err != nil {
			return nil, &exitError{code: 2, err: err}
		}
		l, err := tlsconf.SelfSigned(dir, tlsconf.Hosts(listen), time.Now())
		if err != nil {
			return nil, err
		}
		log.Info("TLS with the local CA: clients trust it with its ca.pem", "ca", l.CA, "made_ca", l.MadeCA, "made_cert", l.MadeCert)
		warnShared(env, "--tls-self-signed CA key", l.CAKey, "it signs certificates clients trust")
		warnShared(env, "--tls-self-signed key", l.Key, "it holds the TLS certificate's private key")
		certFile, keyFile = l.Cert, l.Key
	default:
		warnShared(env, "--tls-key file", keyFile, "it holds the TLS certificate's private key")
	}
	c, err := tlsconf.Load(certFile, keyFile, log)
	if err != nil {
		return nil, &exitError{code: 2, err: fmt.Errorf("--tls-cert: %w", err)}
	}
	reloadOnHangup(ctx, c, log)
	return tlsconf.Config(c), nil
}

// reloadOnHangup reads c's files again at each SIGHUP until ctx ends.
func reloadOnHangup(ctx context.Context, c *tlsconf.Cert, log *slog.Logger) {
	onHangup(ctx, func() {
		if err := c.Reload(); err != nil {
			log.Warn("SIGHUP: the TLS certificate files cannot be used; serving the last good pair", "err", err)
		} else {
			log.Info("SIGHUP: TLS certificate reloaded")
		}
	})
}

// onHangup calls reload at each SIGHUP the process gets until ctx ends,
// one at a time, in a goroutine of its own.
func onHangup(ctx context.Context, reload func()) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	go func() {
		defer signal.Stop(hup)
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				reload()
			}
		}
	}()
}
