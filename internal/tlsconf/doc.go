// Package tlsconf serves TLS on captchaq's listeners (serve, sim and the
// metrics listeners) with the standard library alone.
//
// A Cert is a certificate and key read from PEM files. It is handed to
// crypto/tls through Config's GetCertificate, which looks at the files at
// each handshake (a stat; their bytes too for two seconds after they were
// written, as file times are coarser than writes) and reads them again
// when either has changed, so a rotated certificate (certbot, cert-manager, a rename into
// place) is served from the next connection on, without a restart.
// Reload reads them at once (the commands call it on SIGHUP). A pair that
// cannot be read, or whose key does not match, is reported and the last
// good pair is kept: a rotation caught half-written costs nothing.
//
// Config is the server side: TLS 1.2 at least, HTTP/2 and HTTP/1.1 by ALPN
// (net/http's ServeTLS adds h2), Go's default cipher suites.
//
// SelfSigned is for local use and CI: in a directory of its own (the
// commands use the data directory) it makes, once, a local certificate
// authority (ca.pem, and ca-key.pem kept 0600) and a server certificate
// signed by it (cert.pem, key.pem 0600) for the names it is given and
// localhost. The CA lives 90 days (CALife) and carries critical name
// constraints to those names: its key, if read by someone, signs for no
// other site. Later starts reuse both; the server certificate alone is
// made again when missing, and both when the CA nears its end or does not
// permit a name asked for (a client told to trust ca.pem, with
// NODE_EXTRA_CA_CERTS, REQUESTS_CA_BUNDLE or SSL_CERT_FILE, is given the
// new one then).
package tlsconf
