package docs_test

import (
	"strings"
	"unicode"
)

// simpleCommands splits one line of shell into its simple commands (at
// &&, ||, ;, |, &, parentheses, $( and backquotes), each a list of words
// with quotes removed. Redirections and comments are dropped. It reads the
// shell the docs show, not every shell: enough to find which program each
// command runs and with which arguments.
func simpleCommands(line string) [][]string {
	var (
		cmds  [][]string
		words []string
		word  strings.Builder
		inW   bool
	)
	endWord := func() {
		if inW {
			words = append(words, word.String())
		}
		word.Reset()
		inW = false
	}
	endCmd := func() {
		endWord()
		if len(words) > 0 {
			cmds = append(cmds, words)
		}
		words = nil
	}
	rs := []rune(line)
	for i := 0; i < len(rs); i++ {
		r := rs[i]
		switch {
		case unicode.IsSpace(r):
			endWord()
		case r == '\'':
			inW = true
			for i++; i < len(rs) && rs[i] != '\''; i++ {
				word.WriteRune(rs[i])
			}
		case r == '"':
			inW = true
			for i++; i < len(rs) && rs[i] != '"'; i++ {
				if rs[i] == '\\' && i+1 < len(rs) {
					i++
				}
				word.WriteRune(rs[i])
			}
		case r == '\\':
			inW = true
			if i+1 < len(rs) {
				i++
				word.WriteRune(rs[i])
			}
		case r == '#' && !inW:
			endCmd()
			return cmds
		case r == '$' && i+1 < len(rs) && rs[i+1] == '(':
			endCmd()
			i++
		case strings.ContainsRune(";|&()`", r):
			endCmd()
		case r == '>' || r == '<':
			// A file descriptor number before it belongs to it.
			if inW && strings.Trim(word.String(), "0123456789") == "" {
				word.Reset()
				inW = false
			}
			endWord()
			for i+1 < len(rs) && (rs[i+1] == '>' || rs[i+1] == '&') {
				i++
			}
			if rs[i] == '&' {
				// >&2: the target is the number that follows.
				for i+1 < len(rs) && (unicode.IsDigit(rs[i+1]) || rs[i+1] == '-') {
					i++
				}
				continue
			}
			// The target: the next word.
			for i+1 < len(rs) && unicode.IsSpace(rs[i+1]) {
				i++
			}
			for i+1 < len(rs) && !unicode.IsSpace(rs[i+1]) && !strings.ContainsRune(";|&()`", rs[i+1]) {
				i++
			}
		default:
			inW = true
			word.WriteRune(r)
		}
	}
	endCmd()
	return cmds
}

// program returns the words of a simple command from the program it runs
// on: variable assignments and wrappers (sudo, env, time, nohup, exec) are
// skipped.
func program(words []string) []string {
	for len(words) > 0 {
		w := words[0]
		switch {
		case isAssignment(w):
			words = words[1:]
		case w == "sudo" || w == "env":
			words = words[1:]
			for len(words) > 0 && strings.HasPrefix(words[0], "-") {
				words = words[1:]
			}
		case w == "time" || w == "nohup" || w == "exec":
			words = words[1:]
		default:
			return words
		}
	}
	return nil
}

func isAssignment(w string) bool {
	name, _, ok := strings.Cut(w, "=")
	if !ok || name == "" {
		return false
	}
	for i, r := range name {
		if !(r == '_' || unicode.IsLetter(r) || (i > 0 && unicode.IsDigit(r))) {
			return false
		}
	}
	return true
}
