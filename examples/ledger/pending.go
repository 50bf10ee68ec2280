package main

import (
	"errors"
	"fmt"
	"io"

	"github.com/tidemark-go/tidemark/dedupe"
)

// StoreInfo is what a data folder's store holds.
type StoreInfo struct {
	State   LedgerState
	Applied dedupe.Applied
}

var errNotYet = errors.New("ledger: the state store is not wired yet")

// ReadStore reads the store of the data folder dir.
func ReadStore(dir string) (StoreInfo, error) { return StoreInfo{}, errNotYet }

// ReadState reads the ledger state of the data folder dir.
func ReadState(dir string) (LedgerState, error) {
	info, err := ReadStore(dir)
	return info.State, err
}

func cmdRun(args []string, stdout, stderr io.Writer) int {
	fmt.Fprintln(stderr, errNotYet)
	return 1
}

func cmdBalances(args []string, stdout, stderr io.Writer) int {
	fmt.Fprintln(stderr, errNotYet)
	return 1
}
