package provider_test

import (
	"encoding/json"
	"testing"

	"github.com/belayhq/belay/provider"
)

// TestSiteOption: a browser option set in the session's options or in
// the run's is found; an empty one, another option, or input that is not
// an object is not.
func TestSiteOption(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name           string
		options, input string
		want           string
	}{
		{"none", ``, ``, ""},
		{"session site", `{"site":"chatgpt"}`, ``, "site"},
		{"run start URL", ``, `{"prompt":"x","options":{"site_url":"https://x.example/"}}`, "site_url"},
		{"run attachments", `{"temperature":1}`, `{"options":{"attachments":["/a"]}}`, "attachments"},
		{"empty values", `{"site":"","site_url":null,"attachments":[]}`, `{"options":{"site":""}}`, ""},
		{"other options", `{"temperature":1,"cwd":"/w"}`, `{"options":{"max_tokens":5}}`, ""},
		{"not objects", `[1]`, `"text"`, ""},
	} {
		got := provider.SiteOption(json.RawMessage(tc.options))
		if got == "" {
			got = provider.SiteOption(provider.RunOptions(json.RawMessage(tc.input)))
		}
		if got != tc.want {
			t.Errorf("%s: SiteOption = %q, want %q", tc.name, got, tc.want)
		}
	}
}
