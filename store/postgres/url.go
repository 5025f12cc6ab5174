package postgres

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// IsURL reports whether a --store value names a PostgreSQL database
// (postgres:// or postgresql://) rather than a file.
func IsURL(spec string) bool {
	return strings.HasPrefix(spec, "postgres://") || strings.HasPrefix(spec, "postgresql://")
}

// CheckURL returns the error Open gives for a connection string that
// cannot be read, or nil; it connects to nothing, so a command can refuse
// a bad --store before it starts. The error holds no password.
func CheckURL(connString string) error {
	_, err := parseConnString(connString)
	return err
}

func parseConnString(connString string) (*pgxpool.Config, error) {
	pc, err := pgxpool.ParseConfig(connString)
	if err != nil {
		// pgconn's parse errors hide the password; say so plainly anyway.
		return nil, fmt.Errorf("postgres: the connection string is not valid (%v): use postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE", scrub(err, connString))
	}
	return pc, nil
}

// Redact names the database a connection string points at without its
// password: postgres://USER@HOST:PORT/DATABASE.
func Redact(connString string) string {
	cc, err := pgconn.ParseConfig(connString)
	if err != nil {
		if u, uerr := url.Parse(connString); uerr == nil && u.Scheme != "" {
			return u.Redacted()
		}
		return "(a PostgreSQL connection string that does not parse)"
	}
	u := url.URL{Scheme: "postgres", Host: net.JoinHostPort(cc.Host, strconv.Itoa(int(cc.Port))), Path: "/" + cc.Database}
	if cc.User != "" {
		u.User = url.User(cc.User)
	}
	return u.String()
}

// scrub takes the connection string's password out of an error's text,
// should a driver ever put it there.
func scrub(err error, connString string) error {
	pw := ""
	if cc, perr := pgconn.ParseConfig(connString); perr == nil {
		pw = cc.Password
	} else if u, uerr := url.Parse(connString); uerr == nil {
		pw, _ = u.User.Password()
	}
	if pw == "" || !strings.Contains(err.Error(), pw) {
		return err
	}
	return errors.New(strings.ReplaceAll(err.Error(), pw, "xxxxx"))
}
