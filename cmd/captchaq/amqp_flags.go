package main

import (
	"flag"
	"fmt"
	"log/slog"

	"github.com/captchaq/captchaq/amqp"
)

// amqpFlags are the broker flags shared by enqueue, collect, dlq, stats and
// worker.
type amqpFlags struct {
	url    string
	prefix string
}

func (f *amqpFlags) register(fs *flag.FlagSet, getenv func(string) string) {
	fs.StringVar(&f.url, "amqp", getenv("CAPTCHAQ_AMQP_URL"), "RabbitMQ URL, amqp://user:pass@host:5672/ (env CAPTCHAQ_AMQP_URL)")
	fs.StringVar(&f.prefix, "prefix", amqp.PrefixDefault, "name prefix of every queue and exchange")
}

func (f *amqpFlags) config() (amqp.Config, error) {
	if f.url == "" {
		return amqp.Config{}, fmt.Errorf("--amqp: give the broker URL, e.g. --amqp amqp://guest:guest@127.0.0.1:5672/")
	}
	return amqp.Config{URL: f.url, Prefix: f.prefix, Logger: slog.Default()}, nil
}
