package dataplane

import (
	"net/url"
	"strings"
)

// normalizedPath is a request path made safe to match: the form every rule
// matches against and every backend receives, so a route can never be
// reached through a spelling its match does not take.
type normalizedPath struct {
	// escaped is the path as sent to the backend (percent-encoded where it
	// must be), decoded the path the rules match.
	escaped, decoded string
	// redirect: the client spelled a slash as %2F or %5C; it is sent to
	// the unescaped path rather than served, so the path it sees is the
	// path that matched (Envoy Gateway's UnescapeAndRedirect default).
	redirect bool
}

// normalizePath turns a request's escaped path into the one the data plane
// matches and forwards, as Envoy Gateway does by default:
//   - percent-encoded unreserved characters are decoded ("%2e" is "."), the
//     other escapes written in upper case (RFC 3986 6.2.2);
//   - "." and ".." segments are removed (RFC 3986 5.2.4), so
//     /public/../admin is /admin and matches only what /admin matches;
//   - runs of slashes are merged, and a backslash is a slash;
//   - an escaped slash ("%2F", "%5C") asks for a redirect to the path with
//     the slash unescaped.
//
// ok is false for a path that does not begin with "/".
func normalizePath(escaped string) (normalizedPath, bool) {
	if !strings.HasPrefix(escaped, "/") {
		return normalizedPath{}, false
	}
	// Most paths are normal already; they are used as they came, without
	// the allocations of the walk below.
	if isNormal(escaped) {
		return normalizedPath{escaped: escaped, decoded: escaped}, true
	}
	return normalizeSlow(escaped), true
}

// isNormal says an absolute path is its own normal form: no escapes, no
// backslashes, no ".", ".." or empty segments (but a trailing slash).
func isNormal(p string) bool {
	start := 1
	for i := 1; i <= len(p); i++ {
		if i < len(p) {
			if c := p[i]; c == '%' || c == '\\' {
				return false
			} else if c != '/' {
				continue
			}
		}
		switch p[start:i] {
		case ".", "..":
			return false
		case "":
			if i < len(p) {
				return false
			}
		}
		start = i + 1
	}
	return true
}

// normalizeSlow is normalizePath's walk over every byte.
func normalizeSlow(escaped string) normalizedPath {
	var (
		b        strings.Builder
		redirect bool
	)
	b.Grow(len(escaped))
	for i := 0; i < len(escaped); i++ {
		c := escaped[i]
		switch {
		case c == '\\':
			b.WriteByte('/')
		case c == '%' && i+2 < len(escaped) && ishex(escaped[i+1]) && ishex(escaped[i+2]):
			v := unhex(escaped[i+1])<<4 | unhex(escaped[i+2])
			switch {
			case v == '/' || v == '\\':
				b.WriteByte('/')
				redirect = true
			case unreserved(v):
				b.WriteByte(v)
			default:
				b.WriteByte('%')
				b.WriteByte(upperhex(escaped[i+1]))
				b.WriteByte(upperhex(escaped[i+2]))
			}
			i += 2
		default:
			b.WriteByte(c)
		}
	}
	clean := removeDotSegments(b.String())
	decoded, err := url.PathUnescape(clean)
	if err != nil {
		// Only a malformed escape gets here (net/http refuses those
		// before a handler runs); it is matched as it was written.
		decoded = clean
	}
	return normalizedPath{escaped: clean, decoded: decoded, redirect: redirect}
}

// removeDotSegments drops empty, "." and ".." segments of an absolute path
// (merging slashes), keeping a trailing slash where the last segment was
// one of those or empty.
func removeDotSegments(p string) string {
	segs := strings.Split(p[1:], "/")
	out := make([]string, 0, len(segs))
	trailing := false
	for i, s := range segs {
		last := i == len(segs)-1
		switch s {
		case "", ".":
			trailing = last
		case "..":
			if len(out) > 0 {
				out = out[:len(out)-1]
			}
			trailing = last
		default:
			out = append(out, s)
			trailing = false
		}
	}
	if len(out) == 0 {
		return "/"
	}
	r := "/" + strings.Join(out, "/")
	if trailing {
		r += "/"
	}
	return r
}

// unreserved is RFC 3986's unreserved set: percent-encoding these never
// changes what a URI means, so they are compared decoded.
func unreserved(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '.' || c == '_' || c == '~'
}

func ishex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case '0' <= c && c <= '9':
		return c - '0'
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10
	}
	return c - 'A' + 10
}

func upperhex(c byte) byte {
	if 'a' <= c && c <= 'f' {
		return c - 'a' + 'A'
	}
	return c
}

// trimSegments drops the first n segments of an absolute escaped path,
// returning the rest with its leading slash ("" when nothing is left). A
// prefix match covers whole segments, and after normalization every slash
// of the escaped path is a slash of the decoded one, so a prefix of n
// segments in the decoded path is n segments of the escaped path too.
func trimSegments(escaped string, n int) string {
	rest := escaped
	for ; n > 0 && rest != ""; n-- {
		i := strings.IndexByte(rest[1:], '/')
		if i < 0 {
			return ""
		}
		rest = rest[i+1:]
	}
	return rest
}

// segments counts the segments of a decoded prefix ("/" and "" have none).
func segments(prefix string) int {
	prefix = strings.Trim(prefix, "/")
	if prefix == "" {
		return 0
	}
	return strings.Count(prefix, "/") + 1
}
