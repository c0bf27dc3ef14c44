package httpapi

import (
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
)

// KeySource says where an API key comes from, in order: the environment
// variable Env, the file File (which must be readable by its owner only),
// the inline Inline value. DefaultEnv is used when none of the three is
// configured.
type KeySource struct {
	Env        string
	File       string
	Inline     string
	DefaultEnv string
	// Getenv reads the environment (default os.Getenv).
	Getenv func(string) string
}

// ErrNoKey is returned when no configured source holds a key.
var ErrNoKey = errors.New("no API key")

// maxKeyFile caps the size of a key file read into memory.
const maxKeyFile = 64 << 10

// LoadKey returns the API key and a description of where it came from
// (never the key itself). With nothing configured and DefaultEnv unset or
// empty, it returns "" and ErrNoKey. A key that cannot be sent in a
// header (a line break, a control character) is an error.
func LoadKey(src KeySource) (key, origin string, err error) {
	key, origin, err = loadKey(src)
	if err == nil && !ValidHeaderValue(key) {
		return "", "", fmt.Errorf("the API key from %s holds a line break or control character; a key is one line", origin)
	}
	return key, origin, err
}

func loadKey(src KeySource) (key, origin string, err error) {
	getenv := src.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	if src.Env != "" {
		if v := strings.TrimSpace(getenv(src.Env)); v != "" {
			return v, "environment variable " + src.Env, nil
		}
	}
	if src.File != "" {
		v, err := readKeyFile(src.File)
		if err != nil {
			return "", "", err
		}
		return v, "file " + src.File, nil
	}
	if v := strings.TrimSpace(src.Inline); v != "" {
		return v, "inline api_key", nil
	}
	if src.Env != "" {
		return "", "", fmt.Errorf("%w: environment variable %s is empty or unset and no api_key_file or api_key is configured; export %s=... or set api_key_file", ErrNoKey, src.Env, src.Env)
	}
	if src.DefaultEnv != "" {
		if v := strings.TrimSpace(getenv(src.DefaultEnv)); v != "" {
			return v, "environment variable " + src.DefaultEnv, nil
		}
		return "", "", fmt.Errorf("%w: set api_key_env, api_key_file or api_key, or export %s", ErrNoKey, src.DefaultEnv)
	}
	return "", "", fmt.Errorf("%w: set api_key_env, api_key_file or api_key", ErrNoKey)
}

func readKeyFile(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("api_key_file: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", fmt.Errorf("api_key_file: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return "", fmt.Errorf("api_key_file %s is not a regular file", path)
	}
	if perm := fi.Mode().Perm(); runtime.GOOS != "windows" && perm&0o077 != 0 {
		return "", fmt.Errorf("api_key_file %s has mode %04o: others can read it; it must be readable by its owner only. Fix: chmod 600 %s", path, uint32(perm), path)
	}
	if fi.Size() > maxKeyFile {
		return "", fmt.Errorf("api_key_file %s is %d bytes; a key file holds one key", path, fi.Size())
	}
	b, err := io.ReadAll(io.LimitReader(f, maxKeyFile))
	if err != nil {
		return "", fmt.Errorf("api_key_file: %w", err)
	}
	v := strings.TrimSpace(string(b))
	if v == "" {
		return "", fmt.Errorf("api_key_file %s is empty", path)
	}
	if strings.ContainsAny(v, "\r\n") {
		return "", fmt.Errorf("api_key_file %s holds more than one line; it must hold the key alone", path)
	}
	return v, nil
}
