package pipeline

import (
	"regexp"
	"strings"
)

// Redacted replaces a secret wherever trajflow shows text.
const Redacted = "[REDACTED]"

// urlPattern finds URLs in text; it stops at spaces and quotes.
var urlPattern = regexp.MustCompile("[A-Za-z][A-Za-z0-9+.-]*://[^\\s\"'<>`]+")

// URLPattern returns the pattern RedactURLs finds URLs with.
func URLPattern() *regexp.Regexp { return urlPattern }

// RedactURLs replaces the user info (user name and password) and the query
// string of every URL in s: "https://user:pw@host/v1?api-key=k" becomes
// "https://[REDACTED]@host/v1?[REDACTED]". It is the one redaction of URLs
// trajflow shows: errors, logs, the live view, metrics labels.
func RedactURLs(s string) string {
	if !strings.Contains(s, "://") {
		return s
	}
	return urlPattern.ReplaceAllStringFunc(s, RedactURL)
}

// RedactURL is RedactURLs of one URL: its whole user info (a token given
// as the user name is the whole secret) and its query are replaced.
func RedactURL(u string) string {
	scheme, rest, ok := strings.Cut(u, "://")
	if !ok {
		return u
	}
	end := strings.IndexAny(rest, "/?#")
	if end < 0 {
		end = len(rest)
	}
	if at := strings.LastIndexByte(rest[:end], '@'); at >= 0 {
		rest = Redacted + rest[at:]
	}
	if q := strings.IndexByte(rest, '?'); q >= 0 {
		frag := ""
		if h := strings.IndexByte(rest[q:], '#'); h >= 0 {
			frag = rest[q+h:]
		}
		rest = rest[:q+1] + Redacted + frag
	}
	return scheme + "://" + rest
}
