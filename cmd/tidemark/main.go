package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
)

// Exit codes.
const (
	exitOK    = 0 // done
	exitFail  = 1 // the command failed or refused: stderr says why and what to do
	exitUsage = 2 // the command line is wrong: stderr shows the usage
	exitCheck = 3 // status --check: the server is not ready (a stalled feed, a dead group, a failed store...)
)

const usageText = `tidemark: operator tool for tidemark feeds, pointer files and stores.

Usage:
  tidemark pointer show FILE.readPointer [--input PATH]
  tidemark pointer set FILE.readPointer --position N [--force] [--input PATH]
  tidemark pointer migrate FILE.readPointer [--utf16] [--dry-run] [--input PATH]
  tidemark status --addr HOST:PORT [--token T] [--json] [--check]
  tidemark release --addr HOST:PORT --feed FEED --consumer GROUP [--token T]
  tidemark store show DIR | --addr HOST:PORT [--store NAME] [--namespace NS]... [--bucket B]... [--prefix P] [--from K] [--limit N] [--count] [--json]
  tidemark store backup DIR DEST | --addr HOST:PORT [--store NAME] DEST
  tidemark help [COMMAND]

Exit status: 0 done, 1 failed or refused (the message says why and what to
do), 2 wrong command line, 3 status --check found the server not ready (a
stalled feed, a dead or fenced group, a failed store: what /readyz reports).

Run "tidemark help COMMAND" for a command's details.
`

// commands holds each command's help text, by its name.
var commands = map[string]string{
	"pointer": pointerHelp,
	"status":  statusHelp,
	"release": releaseHelp,
	"store":   storeHelp,
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run runs the command line args (without the program name) and returns the
// exit code.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usageText)
		return exitUsage
	}
	cmd, rest := args[0], args[1:]
	var err error
	switch cmd {
	case "help", "-h", "-help", "--help":
		return help(rest, stdout, stderr)
	case "pointer":
		err = runPointer(rest, stdout)
	case "status":
		err = runStatus(rest, stdout)
	case "release":
		err = runRelease(rest, stdout)
	case "store":
		err = runStore(rest, stdout)
	default:
		err = usageErrorf("", "unknown command %q", cmd)
	}
	return report(err, stderr)
}

// report prints err and returns its exit code.
func report(err error, stderr io.Writer) int {
	if err == nil {
		return exitOK
	}
	var ue *usageError
	if errors.As(err, &ue) {
		if ue.err != nil {
			fmt.Fprintf(stderr, "tidemark: %v\n\n", ue.err)
		}
		if h, ok := commands[ue.cmd]; ok {
			fmt.Fprint(stderr, h)
		} else {
			fmt.Fprint(stderr, usageText)
		}
		return exitUsage
	}
	if errors.Is(err, errUnhealthy) {
		fmt.Fprintf(stderr, "tidemark: %v\n", err)
		return exitCheck
	}
	fmt.Fprintf(stderr, "tidemark: %v\n", err)
	return exitFail
}

func help(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stdout, usageText)
		return exitOK
	}
	h, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "tidemark: no help for %q\n\n%s", args[0], usageText)
		return exitUsage
	}
	fmt.Fprint(stdout, h)
	return exitOK
}

// usageError is a wrong command line of the command cmd ("" for none).
type usageError struct {
	cmd string
	err error // nil for a request for help
}

func (e *usageError) Error() string {
	if e.err == nil {
		return "help requested"
	}
	return e.err.Error()
}

func usageErrorf(cmd, format string, args ...any) error {
	return &usageError{cmd: cmd, err: fmt.Errorf(format, args...)}
}

// parse parses args with fs, allowing flags after the positional
// arguments ("pointer set FILE --position 12"), and returns the positional
// arguments. cmd names the command for its usage.
func parse(cmd string, fs *flag.FlagSet, args []string) ([]string, error) {
	fs.SetOutput(io.Discard)
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, &usageError{cmd: cmd}
			}
			return nil, &usageError{cmd: cmd, err: err}
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		if args[0] == "--" {
			return append(pos, args[1:]...), nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}

// multiFlag is a flag that may be given several times.
type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }
