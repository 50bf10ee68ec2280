package tidemark_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestMakeFuzzRunsEveryTarget holds `make fuzz` to the repository's fuzz
// targets: each one, in its package, and nothing else. A target left out
// is fuzzed by nobody (FuzzBoltCheck, FuzzParseAck and FuzzParseRegistry
// were), and its seeds alone run in make test.
func TestMakeFuzzRunsEveryTarget(t *testing.T) {
	mk, err := os.ReadFile("Makefile")
	if err != nil {
		t.Fatal(err)
	}
	// The fuzz target's recipe: the tab-indented lines after "fuzz:".
	inMake := map[string]bool{}
	cmd := regexp.MustCompile(`\$\(GO\) test (\./\S*) .*-fuzz '\^(Fuzz\w+)\$\$'`)
	recipe := false
	for _, line := range strings.Split(string(mk), "\n") {
		switch {
		case strings.HasPrefix(line, "fuzz:"):
			recipe = true
		case recipe && strings.HasPrefix(line, "\t"):
			if m := cmd.FindStringSubmatch(line); m != nil {
				inMake[filepath.Clean(m[1])+" "+m[2]] = true
			}
		case recipe:
			recipe = false
		}
	}
	if len(inMake) == 0 {
		t.Fatal("the Makefile's fuzz target runs no fuzz target that this test can read")
	}
	decl := regexp.MustCompile(`(?m)^func (Fuzz\w+)\(\w+ \*testing\.F\)`)
	inCode := map[string]bool{}
	err = filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") && path != "." || d.Name() == "testdata" || d.Name() == "target") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range decl.FindAllStringSubmatch(string(src), -1) {
			inCode[filepath.Dir(path)+" "+m[1]] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for k := range inCode {
		if !inMake[k] {
			t.Errorf("fuzz target %s is not run by make fuzz: add it to the Makefile's fuzz target (and to RELIABILITY.md's list)", k)
		}
	}
	for k := range inMake {
		if !inCode[k] {
			t.Errorf("make fuzz runs %s, which no test file of that package declares", k)
		}
	}
}
