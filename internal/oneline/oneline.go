// Package oneline puts error messages on one line, so that every error
// dlock returns fits one log line whatever it wraps (a Redis reply, a Lua
// error with its stack, several errors joined).
package oneline

import "strings"

// breaks are the characters that end a line in a terminal or a log viewer.
const breaks = "\n\r\v\f\u0085\u2028\u2029"

// String returns s with its lines joined by "; " (each trimmed, blank ones
// dropped). A string of one line is returned as it is.
func String(s string) string {
	if !strings.ContainsAny(s, breaks) {
		return s
	}
	var parts []string
	for _, l := range strings.FieldsFunc(s, func(r rune) bool { return strings.ContainsRune(breaks, r) }) {
		if l = strings.TrimSpace(l); l != "" {
			parts = append(parts, l)
		}
	}
	return strings.Join(parts, "; ")
}

// Msg is err's message on one line ("" for nil).
func Msg(err error) string {
	if err == nil {
		return ""
	}
	return String(err.Error())
}

// Join is errors.Join on one line: it returns nil if every err is nil,
// the only non-nil one as it is, and otherwise an error that matches each
// of them (errors.Is, errors.As) and prints their messages on one line,
// separated by "; ".
func Join(errs ...error) error {
	return join("; ", errs)
}

// Chain is like Join for an error and its causes: the messages are
// separated by ": ", and a cause's "dlock: " prefix is dropped (the first
// message has it). Even a single error is wrapped, so that it prints on
// one line.
func Chain(errs ...error) error {
	return join(": ", errs)
}

func join(sep string, errs []error) error {
	var kept []error
	for _, err := range errs {
		if err != nil {
			kept = append(kept, err)
		}
	}
	switch {
	case len(kept) == 0:
		return nil
	case len(kept) == 1 && sep == "; ":
		return kept[0]
	}
	return &joined{sep: sep, errs: kept}
}

// joined is several errors printed on one line.
type joined struct {
	sep  string
	errs []error
}

func (e *joined) Error() string {
	var b strings.Builder
	for i, err := range e.errs {
		msg := Msg(err)
		if i > 0 {
			b.WriteString(e.sep)
			if e.sep == ": " {
				msg = strings.TrimPrefix(msg, "dlock: ")
			}
		}
		b.WriteString(msg)
	}
	return b.String()
}

func (e *joined) Unwrap() []error { return e.errs }
