package main

import (
	"flag"
	"fmt"
	"log/slog"
	"time"

	"github.com/captchaq/captchaq/amqp"
)

// envAMQPURL names the environment variable that gives the broker URL
// (with its password) to every command that takes --amqp, so the password
// stays out of ps.
const envAMQPURL = "CAPTCHAQ_AMQP_URL"

// amqpFlags are the broker flags shared by enqueue, collect, dlq, stats and
// worker.
type amqpFlags struct {
	url    string
	prefix string
}

// register adds --amqp and --prefix. The URL's default is read from the
// environment now but not shown as the flag's default: --help would print
// the password.
func (f *amqpFlags) register(fs *flag.FlagSet, getenv func(string) string) {
	fs.StringVar(&f.url, "amqp", "", "RabbitMQ URL, amqp://user:pass@host:5672/ (default: $"+envAMQPURL+", which keeps the password out of ps)")
	fs.StringVar(&f.prefix, "prefix", amqp.PrefixDefault, "name prefix of every queue and exchange")
	f.url = getenv(envAMQPURL)
}

func (f *amqpFlags) config() (amqp.Config, error) {
	if f.url == "" {
		return amqp.Config{}, fmt.Errorf("--amqp: give the broker URL, e.g. --amqp amqp://guest:guest@127.0.0.1:5672/ (or export %s)", envAMQPURL)
	}
	if err := checkAMQPURL(f.url); err != nil {
		return amqp.Config{}, err
	}
	return amqp.Config{URL: f.url, Prefix: f.prefix, Logger: slog.Default()}, nil
}

// brokerWaitDefault is how long serve --amqp and worker wait at start for a
// broker that is not taking connections yet (--broker-wait): a process
// started with its broker, or during a broker restart, waits for it.
const brokerWaitDefault = time.Minute

// addBrokerWaitFlag adds --broker-wait to a long-running command's flags.
func addBrokerWaitFlag(fs *flag.FlagSet) *time.Duration {
	return fs.Duration("broker-wait", brokerWaitDefault, "at start, how long to wait for a broker that is not taking connections yet (not listening, or still starting), trying every second; a refused login fails at once (0: no wait)")
}
