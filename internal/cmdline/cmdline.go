// Package cmdline builds the belay command lines that errors, the CLI and
// the doctor tell a person to run, quoted for a POSIX shell, so that every
// place that names one spells it the same way.
package cmdline

import "strings"

// Quote is s as one POSIX shell word: as it is when it needs no quoting,
// else single-quoted. (A leading '=' is quoted too: zsh expands =word to
// a path.)
func Quote(s string) string {
	if s != "" && s[0] != '=' && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.,:/@%+=") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// Join quotes each argument and joins them into one command line.
func Join(args ...string) string {
	q := make([]string, len(args))
	for i, a := range args {
		q[i] = Quote(a)
	}
	return strings.Join(q, " ")
}

// BrowserSite is belay browser verb (check, login) for site, at siteURL,
// the start URL a run was sent with (--site-url; "" for the profile's),
// with the seed profiles of provider (--provider, when it is not the
// default, "browser").
func BrowserSite(verb, provider, site, siteURL string) string {
	args := []string{"belay", "browser", verb, site}
	if provider != "" && provider != "browser" {
		args = append(args, "--provider", provider)
	}
	if siteURL != "" {
		args = append(args, "--url", siteURL)
	}
	return Join(args...)
}
