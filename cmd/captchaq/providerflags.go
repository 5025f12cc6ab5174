package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/provider"
)

// The environment variables every subcommand that talks to the provider
// reads. The key is never a flag: a flag's value shows in ps.
const (
	envKey     = "CAPTCHAAI_KEY"
	envKeyFile = "CAPTCHAAI_KEY_FILE"
	envURL     = "CAPTCHAAI_URL"
)

// addAPIURLFlag registers --api-url on fs.
func addAPIURLFlag(fs *flag.FlagSet) *string {
	return fs.String("api-url", "", "provider base URL (default $"+envURL+", else "+provider.BaseURLDefault+")")
}

// providerKey reads the account key from CAPTCHAAI_KEY, else from the file
// named by CAPTCHAAI_KEY_FILE.
func providerKey(env *environment) (string, error) {
	if k := strings.TrimSpace(env.getenv(envKey)); k != "" {
		return k, nil
	}
	path := strings.TrimSpace(env.getenv(envKeyFile))
	if path == "" {
		return "", usageError(errors.New("no provider key: set " + envKey + " to the account key, or " + envKeyFile + " to a file that holds it"))
	}
	b, err := os.ReadFile(path)
	if err != nil {
		var pe *os.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return "", usageError(fmt.Errorf("%s: cannot read %q: %v", envKeyFile, path, err))
	}
	k := strings.TrimSpace(string(b))
	if k == "" {
		return "", usageError(fmt.Errorf("%s: %q is empty; put the account key in it", envKeyFile, path))
	}
	warnShared(env, envKeyFile, path, "it holds the provider account's key")
	return k, nil
}

// warnShared warns on stderr when the file at path, a secret of kind what
// (why says what it holds), can be read by other users than its owner.
func warnShared(env *environment, what, path, why string) {
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm()&0o077 == 0 {
		return
	}
	fmt.Fprintf(env.stderr, "captchaq: warning: %s %s can be read by other users (mode %04o) and %s: chmod 600 %s\n", what, path, fi.Mode().Perm(), why, path)
}

// providerURL picks the base URL: the flag, else CAPTCHAAI_URL, else the
// default.
func providerURL(env *environment, apiURL string) string {
	if u := strings.TrimSpace(apiURL); u != "" {
		return u
	}
	if u := strings.TrimSpace(env.getenv(envURL)); u != "" {
		return u
	}
	return provider.BaseURLDefault
}

// newProviderClient builds the provider client from the environment and the
// --api-url flag's value.
func newProviderClient(env *environment, apiURL string) (*provider.Client, error) {
	if err := checkAPIURL(env, apiURL); err != nil {
		return nil, err
	}
	key, err := providerKey(env)
	if err != nil {
		return nil, err
	}
	return provider.NewClient(provider.ClientConfig{BaseURL: providerURL(env, apiURL), Key: key})
}

// accountCheckTimeout bounds the key check a service makes at start.
const accountCheckTimeout = 5 * time.Second

// checkAccount asks the provider for the balance once, so a service whose
// key the provider refuses stops at start (exit code 3) instead of running
// paused. Any other failure is only reported: the provider may come back.
func checkAccount(ctx context.Context, pc captchaq.BalanceChecker, warn func(error)) error {
	ctx, cancel := context.WithTimeout(ctx, accountCheckTimeout)
	defer cancel()
	_, err := pc.Balance(ctx)
	switch {
	case err == nil:
		return nil
	case provider.ClassOf(err) == provider.ClassAccount:
		return &exitError{code: exitAccount, err: fmt.Errorf("the provider refused the account: %w; fix the key (%s or %s), plan or IP allow-list", err, envKey, envKeyFile)}
	}
	warn(err)
	return nil
}

// providersFlag is --providers: a file of several providers, which
// replaces the command's flags named in replaces (without dashes).
type providersFlag struct {
	fs       *flag.FlagSet
	path     string
	replaces []string
}

// addProvidersFlag registers --providers on fs; its help names the flags
// it replaces, which alone refuses beside it.
func addProvidersFlag(fs *flag.FlagSet, replaces ...string) *providersFlag {
	p := &providersFlag{fs: fs, replaces: replaces}
	names := make([]string, len(replaces))
	for i, r := range replaces {
		names[i] = "--" + r
	}
	fs.StringVar(&p.path, "providers", "", fmt.Sprintf("JSON `FILE` of several providers, the first preferred (replaces %s; see docs/providers.md)", strings.Join(names, ", ")))
	return p
}

// alone refuses --providers beside the flags its file replaces, naming
// each one the command line gives. A flag counts when it is given at all,
// even at its default value; an empty --providers is no file and replaces
// nothing. The environment (CAPTCHAAI_URL, the key) is no conflict: with
// --providers it is not read for the url, and keys come from the
// variables the file names.
func (p *providersFlag) alone() error {
	if p.path == "" {
		return nil
	}
	given := map[string]bool{}
	p.fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	var both []string
	for _, name := range p.replaces {
		if p.fs.Lookup(name) == nil {
			panic("providersFlag: " + p.fs.Name() + " has no --" + name)
		}
		if given[name] {
			both = append(both, "--"+name)
		}
	}
	if len(both) == 0 {
		return nil
	}
	return usageError(fmt.Errorf("--providers: cannot be combined with %s: each provider in the file has its url and threads", strings.Join(both, ", ")))
}

// loadProviders reads a --providers file; keys come from the environment
// variables (or key files) the file names.
func loadProviders(env *environment, path string) ([]captchaq.ProviderConfig, error) {
	return readProviders(path, captchaq.ProvidersEnv{Getenv: env.getenv})
}

// loadProvidersWithoutKeys reads a --providers file for a door that only
// validates (serve --amqp, enqueue): names and methods, no key.
func loadProvidersWithoutKeys(path string) ([]captchaq.ProviderConfig, error) {
	return readProviders(path, captchaq.ProvidersEnv{WithoutKeys: true})
}

func readProviders(path string, penv captchaq.ProvidersEnv) ([]captchaq.ProviderConfig, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		var pe *os.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return nil, usageError(fmt.Errorf("--providers: cannot read %q: %v", path, err))
	}
	ps, err := captchaq.ParseProviders(b, penv)
	if err != nil {
		return nil, usageError(fmt.Errorf("--providers %s: %w", path, err))
	}
	return ps, nil
}
