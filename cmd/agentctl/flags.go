package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
)

// cmdFlags is the flag set of one command, with its synopsis for the usage
// message.
type cmdFlags struct {
	*flag.FlagSet
	name     string // such as "runs create"
	synopsis string // the arguments, such as "[flags] TEXT"
	about    string // what the command does
	a        *app
}

// newFlags makes the flag set of command name. Every command also takes -o,
// so that it may follow the command too.
func (a *app) newFlags(name, synopsis, about string) *cmdFlags {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	f := &cmdFlags{FlagSet: fs, name: name, synopsis: synopsis, about: about, a: a}
	fs.Func("o", "output `format`: table or json (as the global -o)", func(s string) error {
		switch s {
		case "table":
			a.json = false
		case "json":
			a.json = true
		default:
			return errors.New("want table or json")
		}
		return nil
	})
	return f
}

// printUsage writes the command's usage and flags to w.
func (f *cmdFlags) printUsage(w io.Writer) {
	fmt.Fprintf(w, "usage: agentctl %s %s\n\n%s\n", f.name, f.synopsis, f.about)
	n := 0
	f.VisitAll(func(*flag.Flag) { n++ })
	if n > 0 {
		fmt.Fprintln(w, "\nflags:")
		f.SetOutput(w)
		f.PrintDefaults()
		f.SetOutput(io.Discard)
	}
}

// parse parses args, whose flags may come before, between or after the
// positional arguments (a "--" ends the flags), and checks that there are
// between minArgs and maxArgs positional arguments (maxArgs < 0: no
// limit). When it returns ok false, the command returns code: 0 after
// -h (the usage is printed on stdout), exitError after a usage error
// (printed on stderr).
func (f *cmdFlags) parse(args []string, minArgs, maxArgs int) (pos []string, code int, ok bool) {
	for {
		if err := f.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				f.printUsage(f.a.stdout)
				return nil, exitOK, false
			}
			return nil, f.usageError(err.Error()), false
		}
		rest := f.Args()
		if len(rest) == 0 {
			break
		}
		if consumed := len(args) - len(rest); consumed > 0 && args[consumed-1] == "--" {
			pos = append(pos, rest...)
			break
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
	switch {
	case len(pos) < minArgs:
		return nil, f.usageError("missing arguments"), false
	case maxArgs >= 0 && len(pos) > maxArgs:
		return nil, f.usageError(fmt.Sprintf("too many arguments: %s", strings.Join(pos[maxArgs:], " "))), false
	}
	return pos, exitOK, true
}

// usageError prints msg and the command's usage on stderr, and returns
// exitError.
func (f *cmdFlags) usageError(msg string) int {
	fmt.Fprintf(f.a.stderr, "agentctl %s: %s\n\n", f.name, msg)
	f.printUsage(f.a.stderr)
	return exitError
}

// listFlag is a comma-separated list flag that tells "not given" from
// "given empty" (which means an empty list).
type listFlag struct {
	set  bool
	vals []string
}

func (l *listFlag) String() string { return strings.Join(l.vals, ",") }

func (l *listFlag) Set(s string) error {
	l.set = true
	l.vals = []string{}
	for _, v := range strings.Split(s, ",") {
		if v = strings.TrimSpace(v); v != "" {
			l.vals = append(l.vals, v)
		}
	}
	return nil
}

// pageFlags are the -limit and -cursor of a command that lists a page.
type pageFlags struct {
	f      *cmdFlags
	limit  *int
	cursor *string
}

// pages adds -limit and -cursor to f, for a page of things ("runs").
func (f *cmdFlags) pages(things string) pageFlags {
	return pageFlags{f: f,
		limit:  f.Int("limit", 0, "the most "+things+" to list: `N` (default: the server's)"),
		cursor: f.String("cursor", "", "where the page starts: the `cursor` a previous page gave")}
}

// parse is cmdFlags.parse that also refuses a negative -limit.
func (p pageFlags) parse(args []string, minArgs, maxArgs int) (pos []string, code int, ok bool) {
	if pos, code, ok = p.f.parse(args, minArgs, maxArgs); !ok {
		return pos, code, ok
	}
	if *p.limit < 0 {
		return nil, p.f.usageError("-limit must not be negative"), false
	}
	return pos, exitOK, true
}
