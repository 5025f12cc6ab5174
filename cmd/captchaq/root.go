package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// The command tree is cobra's: it gives help, version, shell completion
// and command suggestions. Each command parses its own flags with the
// flag package (cobra's DisableFlagParsing), so every documented spelling
// keeps working: -threads as well as --threads, -threads=5, a flag after
// the file. pflag would refuse the single-dash long forms.

// newRootCommand builds the command tree for one run of args.
func newRootCommand(ctx context.Context, env *environment, args []string) *cobra.Command {
	root := &cobra.Command{
		Use:                        "captchaq",
		Short:                      "solve captchas through a queue that keeps a plan's threads busy",
		Version:                    versionText(),
		SilenceErrors:              true,
		SilenceUsage:               true,
		SuggestionsMinimumDistance: 2,
		// captchaq alone is a usage error: the help goes to stderr.
		RunE: func(c *cobra.Command, _ []string) error {
			writeTopHelp(env.stderr)
			return usageError(errors.New("no command given"))
		},
		Args: cobra.NoArgs,
	}
	root.SetArgs(append([]string{}, args...))
	root.SetIn(env.stdin)
	root.SetOut(env.stdout)
	root.SetErr(env.stderr)
	root.SetVersionTemplate("{{.Version}}")
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error {
		return usageError(&flagError{err: err})
	})

	completing := len(args) > 0 && (args[0] == cobra.ShellCompRequestCmd || args[0] == cobra.ShellCompNoDescRequestCmd)
	for _, name := range sortedCommands() {
		root.AddCommand(newSubcommand(ctx, env, name, completing))
	}
	root.AddCommand(&cobra.Command{
		Use:   "version",
		Short: "print the module version, the VCS commit and the Go version of this build",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			fmt.Fprint(env.stdout, versionText())
			return nil
		},
	})

	root.SetHelpCommand(newHelpCommand(root))
	// A command of captchaq's own prints its flag set's usage; cobra's
	// commands (completion) keep cobra's help.
	cobraHelp := root.HelpFunc()
	root.SetHelpFunc(func(c *cobra.Command, args []string) {
		switch cmd, ok := commands[c.Name()]; {
		case c == root:
			writeTopHelp(env.stdout)
		case ok && c.Parent() == root:
			_ = cmd.run(ctx, env, []string{"--help"})
		default:
			cobraHelp(c, args)
		}
	})
	root.InitDefaultHelpCmd()
	root.InitDefaultCompletionCmd()
	return root
}

// newSubcommand is captchaq's command name in cobra's tree. completing:
// the run is a shell's completion request, which needs the flags.
func newSubcommand(ctx context.Context, env *environment, name string, completing bool) *cobra.Command {
	cmd := commands[name]
	sub := &cobra.Command{
		Use:                name,
		Short:              cmd.summary,
		DisableFlagParsing: true,
		RunE: func(c *cobra.Command, args []string) error {
			err := cmd.run(c.Context(), env, args)
			if errors.Is(err, flag.ErrHelp) {
				return nil // the command printed its help; cobra would print it again
			}
			return err
		},
	}
	if len(cmd.actions) > 0 {
		sub.ValidArgsFunction = completeActions(cmd.actions)
	}
	if completing {
		// Cobra completes the flags it knows even when it does not
		// parse them; they are the command's own, from its flag sets.
		for _, fs := range commandFlagSets(ctx, cmd) {
			sub.Flags().AddGoFlagSet(fs)
		}
		sub.Flags().VisitAll(func(f *pflag.Flag) { f.Usage = strings.ReplaceAll(f.Usage, "`", "") })
	}
	return sub
}

// newHelpCommand is `captchaq help [NAME]`: NAME --help, or the top help;
// an unknown NAME is a usage error.
func newHelpCommand(root *cobra.Command) *cobra.Command {
	return &cobra.Command{
		Use:   "help [command]",
		Short: "print a command's help: captchaq help batch",
		ValidArgsFunction: func(*cobra.Command, []string, string) ([]cobra.Completion, cobra.ShellCompDirective) {
			return sortedCommands(), cobra.ShellCompDirectiveNoFileComp
		},
		RunE: func(_ *cobra.Command, args []string) error {
			if len(args) == 0 {
				return root.Help()
			}
			if !isCommand(root, args[0]) {
				return usageError(unknownCommand(root, args[0]))
			}
			target, _, err := root.Find(args)
			if err != nil {
				return usageError(err)
			}
			return target.Help()
		},
	}
}

// isCommand reports whether name is one of root's commands, cobra's
// completion request included.
func isCommand(root *cobra.Command, name string) bool {
	if name == cobra.ShellCompRequestCmd || name == cobra.ShellCompNoDescRequestCmd {
		return true
	}
	for _, c := range root.Commands() {
		if c.Name() == name || c.HasAlias(name) {
			return true
		}
	}
	return false
}

// unknownCommand says name is no command, and which one was likely meant.
func unknownCommand(root *cobra.Command, name string) error {
	if s := root.SuggestionsFor(name); len(s) > 0 {
		return fmt.Errorf("unknown command %q; did you mean %q?", name, s[0])
	}
	return fmt.Errorf("unknown command %q", name)
}

// completeActions completes a command's first argument from actions.
func completeActions(actions []string) cobra.CompletionFunc {
	return func(_ *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		switch {
		case strings.HasPrefix(toComplete, "-"):
			return nil, cobra.ShellCompDirectiveNoFileComp // cobra offers the flags
		case len(args) > 0:
			return nil, cobra.ShellCompDirectiveDefault // a task file
		}
		return actions, cobra.ShellCompDirectiveNoFileComp
	}
}

// commandFlagSets returns the flag sets cmd defines, with nothing run and
// nothing printed.
func commandFlagSets(ctx context.Context, cmd command) []*flag.FlagSet {
	var sets []*flag.FlagSet
	env := &environment{
		stdin: strings.NewReader(""), stdout: io.Discard, stderr: io.Discard,
		getenv:    func(string) string { return "" },
		onFlagSet: func(fs *flag.FlagSet) { sets = append(sets, fs) },
	}
	if cmd.defineFlags != nil {
		cmd.defineFlags(ctx, env)
	} else {
		_ = cmd.run(ctx, env, []string{"--help"})
	}
	return sets
}

// sortedCommands returns the names of captchaq's commands in order.
func sortedCommands() []string {
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// writeTopHelp writes `captchaq --help`.
func writeTopHelp(w io.Writer) {
	fmt.Fprintln(w, "captchaq solves captchas through a queue that keeps a plan's threads busy.")
	fmt.Fprintln(w, "\nusage: captchaq <command> [flags]\n\ncommands:")
	for _, n := range sortedCommands() {
		fmt.Fprintf(w, "  %-10s %s\n", n, commands[n].summary)
	}
	fmt.Fprint(w, `  completion print a shell completion script: bash, zsh, fish or powershell
  help       print a command's help: captchaq help batch
  version    print the module version, the VCS commit and the Go version

The provider key comes from `+envKey+`, else from the file named by `+envKeyFile+`
(never from a flag: flags show in ps). With neither, and no --api-url or `+envURL+`,
batch and solve run on the built-in simulator: no account, simulated answers.

Exit codes: 0 done, 1 the tool failed (a file, the store, the broker), 2 bad usage or
input, 3 the provider refused the account, 4 some tasks got no answer, 130 interrupted.

Docs: README.md and docs/ in the source (docs/commands.md: every command and its flags).
Run 'captchaq <command> --help' for a command's flags.
`)
}
