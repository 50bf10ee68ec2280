package main

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
)

// req is a small stand-in for testify's require (whose dependencies are
// not in go.sum): each check fails the test at once.
type req struct{}

var require req

func msg(extra []any) string {
	if len(extra) == 0 {
		return ""
	}
	if f, ok := extra[0].(string); ok {
		return ": " + fmt.Sprintf(f, extra[1:]...)
	}
	return ": " + fmt.Sprint(extra...)
}

func (req) Equal(t testing.TB, want, got any, extra ...any) {
	t.Helper()
	if !reflect.DeepEqual(want, got) {
		t.Fatalf("not equal%s\nwant: %#v\n got: %#v", msg(extra), want, got)
	}
}

func (req) EqualValues(t testing.TB, want, got any, extra ...any) {
	t.Helper()
	if fmt.Sprint(want) != fmt.Sprint(got) {
		t.Fatalf("not equal%s\nwant: %v\n got: %v", msg(extra), want, got)
	}
}

func (req) Len(t testing.TB, v any, n int, extra ...any) {
	t.Helper()
	if l := reflect.ValueOf(v).Len(); l != n {
		t.Fatalf("length %d, want %d%s", l, n, msg(extra))
	}
}

func (req) True(t testing.TB, b bool, extra ...any) {
	t.Helper()
	if !b {
		t.Fatalf("not true%s", msg(extra))
	}
}

func (req) False(t testing.TB, b bool, extra ...any) {
	t.Helper()
	if b {
		t.Fatalf("not false%s", msg(extra))
	}
}

func (req) Positive(t testing.TB, n int, extra ...any) {
	t.Helper()
	if n <= 0 {
		t.Fatalf("%d is not positive%s", n, msg(extra))
	}
}

func (req) LessOrEqual(t testing.TB, a, b int64, extra ...any) {
	t.Helper()
	if a > b {
		t.Fatalf("%d > %d%s", a, b, msg(extra))
	}
}

func (req) NoError(t testing.TB, err error, extra ...any) {
	t.Helper()
	if err != nil {
		t.Fatalf("unexpected error%s: %v", msg(extra), err)
	}
}

func (req) Error(t testing.TB, err error, extra ...any) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error%s", msg(extra))
	}
}

func (req) ErrorIs(t testing.TB, err, target error, extra ...any) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("error %v is not %v%s", err, target, msg(extra))
	}
}

func (req) NotErrorIs(t testing.TB, err, target error, extra ...any) {
	t.Helper()
	if errors.Is(err, target) {
		t.Fatalf("error %v is %v%s", err, target, msg(extra))
	}
}

func (req) ErrorContains(t testing.TB, err error, s string, extra ...any) {
	t.Helper()
	if err == nil || !strings.Contains(err.Error(), s) {
		t.Fatalf("error %v does not contain %q%s", err, s, msg(extra))
	}
}

func (req) Contains(t testing.TB, s, sub string, extra ...any) {
	t.Helper()
	if !strings.Contains(s, sub) {
		t.Fatalf("%q does not contain %q%s", s, sub, msg(extra))
	}
}

func (req) NotContains(t testing.TB, s, sub string, extra ...any) {
	t.Helper()
	if strings.Contains(s, sub) {
		t.Fatalf("%q contains %q%s", s, sub, msg(extra))
	}
}
