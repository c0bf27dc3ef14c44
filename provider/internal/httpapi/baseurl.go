package httpapi

import (
	"fmt"
	"net/url"
	"strings"
)

// BaseURL checks an API root from a provider's config (def if empty): an
// http(s) URL without credentials or a query, returned without a trailing
// slash. example goes into the error message.
func BaseURL(raw, def, example string) (string, error) {
	if raw == "" {
		raw = def
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", fmt.Errorf("base_url %q is not an http(s) URL (example: %q)", raw, example)
	}
	if u.User != nil || u.RawQuery != "" || u.ForceQuery {
		return "", fmt.Errorf("base_url must not carry credentials or a query; use api_key_env or api_key_file")
	}
	if u.Fragment != "" || strings.Contains(raw, "#") {
		return "", fmt.Errorf("base_url %q must not have a #fragment: request paths are appended to it", raw)
	}
	return strings.TrimRight(raw, "/"), nil
}
