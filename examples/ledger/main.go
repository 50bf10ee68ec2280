// Command ledger is tidemark's complete example: a ledger server that reads
// `id,account,amount` lines from a file feed and keeps balances in a durable
// store, exactly once, and the kill -9 demonstration that proves it.
//
// Usage:
//
//	ledger gen --lines N [--accounts K] [--seed S] [--out PATH]
//	ledger run --input PATH --data DIR [--store bbolt|pebble|postgres://USER@HOST:PORT/DB] [--dedupe=true|false] [--sync]
//	           [--batch N] [--max-batch N] [--batch-interval D] [--follow] [--pace D]
//	ledger balances --data DIR
//	ledger output --data DIR [--name output.csv|rejects.csv]
//	ledger check --input PATH --data DIR
//	ledger demo
//
// and, when one machine is not enough, a partitioned ledger: a JetStream
// stream read by several workers, its state in PostgreSQL:
//
//	ledger publish --input PATH --to nats://HOST:PORT/STREAM [--partitions N]
//	ledger run --source nats://HOST:PORT/STREAM --store postgres://USER@HOST:PORT/DB [--worker NAME]
//	ledger check --source nats://HOST:PORT/STREAM --store postgres://USER@HOST:PORT/DB [--input PATH]
//
// See README.md beside this file for what each command prints.
package main

import (
	"fmt"
	"io"
	"os"
)

const usage = `usage: ledger COMMAND [flags]

commands:
  gen       write a deterministic ledger
  run       the server: apply a ledger file to a durable store
  balances  print the balances a data folder holds
  output    print a data folder's output.csv (or rejects.csv): with
            --store postgres://, the outputs are rows of the store
  check     compare a data folder with its input
  demo      the kill -9 demonstration (what make run runs)
  publish   publish a ledger file into a partitioned JetStream stream
            (then run --source and check --source: several workers, state in PostgreSQL)

Run "ledger COMMAND -h" for a command's flags.
`

func main() {
	standalone = true
	os.Exit(Main(os.Args[1:], os.Stdout, os.Stderr))
}

// Main runs the command in args and returns the exit code.
func Main(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	cmd, rest := args[0], args[1:]
	switch cmd {
	case "gen":
		return cmdGen(rest, stdout, stderr)
	case "run":
		return cmdRun(rest, stdout, stderr)
	case "balances":
		return cmdBalances(rest, stdout, stderr)
	case "check":
		return cmdCheck(rest, stdout, stderr)
	case "output":
		return cmdOutput(rest, stdout, stderr)
	case "demo":
		return cmdDemo(rest, stdout, stderr)
	case "publish":
		return cmdPublish(rest, stdout, stderr)
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	}
	fmt.Fprintf(stderr, "ledger: unknown command %q\n\n%s", cmd, usage)
	return 2
}
