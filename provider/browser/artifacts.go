package browser

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"github.com/belayhq/belay/internal/atomicfile"
	"github.com/belayhq/belay/internal/vfs"
)

// ManifestName is the artifact manifest in a run's artifact directory.
const ManifestName = "manifest.json"

// Artifact is one file linked from the answer turn.
type Artifact struct {
	Name string `json:"name"`
	// File is the downloaded file's name in the artifact directory.
	File     string `json:"file,omitempty"`
	URL      string `json:"url"`
	Size     int64  `json:"size"`
	SHA256   string `json:"sha256,omitempty"`
	Type     string `json:"type,omitempty"`
	Attempts int    `json:"attempts"`
	Error    string `json:"error,omitempty"`
}

// Manifest lists a run's artifacts.
type Manifest struct {
	Session string `json:"session"`
	Run     string `json:"run"`
	// Answer is the final answer as the site gives it.
	Answer    *Answer    `json:"answer,omitempty"`
	Artifacts []Artifact `json:"artifacts"`
}

// AnswerName is the file of the final answer in a run's artifact
// directory.
const AnswerName = "answer.md"

// Answer is the final answer of a run, taken when the turn was complete:
// from the turn's copy button, the page's clipboard write intercepted
// (Source "copy": the site's markdown), or, when the site offers no copy,
// the turn's text (Source "dom", Note says why).
type Answer struct {
	File   string `json:"file"`
	Source string `json:"source"`
	Note   string `json:"note,omitempty"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
	// SameAsStream: the answer equals the text streamed into the journal
	// (what belay read prints).
	SameAsStream bool `json:"sameAsStream"`
}

// Answer sources.
const (
	SourceCopy = "copy"
	SourceDOM  = "dom"
)

// ReadManifest reads the manifest in an artifact directory.
func ReadManifest(dir string) (*Manifest, error) {
	b, err := os.ReadFile(filepath.Join(dir, ManifestName))
	if err != nil {
		return nil, err
	}
	var m Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("browser: %s: %w", filepath.Join(dir, ManifestName), err)
	}
	return &m, nil
}

// maxArtifact caps one artifact's size.
const maxArtifact = 2 << 30

// artifactDir is where the run's artifacts go.
func (r *runState) artifactDir() string {
	if f := r.p.cfg.ArtifactDir; f != nil {
		return f(r.req.Session, r.req.Run)
	}
	return filepath.Join(r.runDir, "artifacts")
}

// writeAnswer stores the final answer in the artifact directory and
// starts the manifest with it.
func (r *runState) writeAnswer(m *Manifest, text, source, note, streamed string) error {
	dir := r.artifactDir()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return internal(err, "create the artifact directory")
	}
	if err := atomicfile.WriteFile(vfs.OS, filepath.Join(dir, AnswerName), []byte(text), 0o600); err != nil {
		return internal(err, "write the answer")
	}
	sum := sha256.Sum256([]byte(text))
	m.Answer = &Answer{File: AnswerName, Source: source, Note: note, Size: int64(len(text)),
		SHA256: hex.EncodeToString(sum[:]), SameAsStream: text == streamed}
	return writeManifest(dir, m)
}

func writeManifest(dir string, m *Manifest) error {
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return internal(err, "encode the artifact manifest")
	}
	if err := atomicfile.WriteFile(vfs.OS, filepath.Join(dir, ManifestName), b, 0o600); err != nil {
		return internal(err, "write the artifact manifest")
	}
	return nil
}

// artifacts downloads the files the answer turn links to, with retries and
// no overall time cap but ArtifactTimeout per file, and writes the
// manifest after each one. A file that cannot be downloaded is recorded
// with its error; it does not fail the run, whose answer is complete.
func (r *runState) artifacts(ctx context.Context, m *Manifest, links []linkInfo) error {
	dir := r.artifactDir()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return internal(err, "create the artifact directory")
	}
	used := map[string]bool{ManifestName: true, AnswerName: true}
	for _, l := range links {
		a := Artifact{Name: l.Name, URL: l.Href, File: fileName(l.Name, used)}
		for a.Attempts = 1; ; a.Attempts++ {
			err := r.download(ctx, l.Href, filepath.Join(dir, a.File), &a)
			if err == nil {
				a.Error = ""
				break
			}
			a.Error = err.Error()
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if a.Attempts >= 3 {
				a.File, a.Size, a.SHA256 = "", 0, ""
				break
			}
			if err := sleep(ctx, time.Duration(a.Attempts)*time.Second); err != nil {
				return err
			}
		}
		m.Artifacts = append(m.Artifacts, a)
		if err := writeManifest(dir, m); err != nil {
			return err
		}
	}
	return nil
}

// fileName makes a safe, unused file name from a link's label.
func fileName(label string, used map[string]bool) string {
	base := filepath.Base(strings.ReplaceAll(label, "\\", "/"))
	base = strings.Map(func(r rune) rune {
		if r < 32 || r == '/' || r == 0x7f {
			return '_'
		}
		return r
	}, base)
	if base == "" || base == "." || base == ".." {
		base = "artifact"
	}
	name := base
	ext := filepath.Ext(base)
	for i := 2; used[name]; i++ {
		name = fmt.Sprintf("%s-%d%s", strings.TrimSuffix(base, ext), i, ext)
	}
	used[name] = true
	return name
}

// download fetches one artifact into path: http(s) links with the
// browser's cookies, blob: and data: links through the page.
func (r *runState) download(ctx context.Context, href, path string, a *Artifact) error {
	ctx, cancel := context.WithTimeout(ctx, r.p.cfg.ArtifactTimeout)
	defer cancel()
	var body io.ReadCloser
	switch {
	case strings.HasPrefix(href, "http://") || strings.HasPrefix(href, "https://"):
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, href, nil)
		if err != nil {
			return err
		}
		cookies, ua, err := r.pageCredentials(ctx, href)
		if err != nil {
			return err
		}
		for _, c := range cookies {
			req.AddCookie(&http.Cookie{Name: c.Name, Value: c.Value})
		}
		if ua != "" {
			req.Header.Set("User-Agent", ua)
		}
		resp, err := httpClient.Do(req)
		if err != nil {
			return err
		}
		if resp.StatusCode != http.StatusOK {
			resp.Body.Close()
			return fmt.Errorf("GET %s: %s", href, resp.Status)
		}
		if resp.ContentLength > maxArtifact {
			resp.Body.Close()
			return fmt.Errorf("GET %s: %d bytes is more than %d", href, resp.ContentLength, int64(maxArtifact))
		}
		body = resp.Body
	case strings.HasPrefix(href, "blob:") || strings.HasPrefix(href, "data:"):
		var b64 string
		if err := r.t.eval(ctx, `async (u) => { const b = new Uint8Array(await (await fetch(u)).arrayBuffer());
			let s = ""; for (let i = 0; i < b.length; i += 32768) s += String.fromCharCode.apply(null, b.subarray(i, i + 32768));
			return btoa(s); }`, &b64, href); err != nil {
			return fmt.Errorf("read %s in the page: %w", href, err)
		}
		data, err := base64.StdEncoding.DecodeString(b64)
		if err != nil {
			return err
		}
		body = io.NopCloser(strings.NewReader(string(data)))
	default:
		return fmt.Errorf("cannot download %q", href)
	}
	defer body.Close()
	tmp := path + ".part"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	h := sha256.New()
	sniff := &prefix{max: 512}
	n, err := io.Copy(io.MultiWriter(f, h, sniff), io.LimitReader(body, maxArtifact+1))
	if err == nil && n > maxArtifact {
		err = fmt.Errorf("more than %d bytes", int64(maxArtifact))
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return err
	}
	a.Size, a.SHA256, a.Type = n, hex.EncodeToString(h.Sum(nil)), http.DetectContentType(sniff.b)
	return nil
}

// pageCredentials returns the browser's cookies for url and its user
// agent, so a download is made as the logged-in page would make it.
func (r *runState) pageCredentials(ctx context.Context, url string) ([]*network.Cookie, string, error) {
	cookies, err := run(ctx, r.t, 15*time.Second, func(ctx context.Context, tg *chromedp.Target) ([]*network.Cookie, error) {
		res, err := cdp.Call(ctx, tg, network.GetCookies, network.GetCookiesParams{URLs: []string{url}})
		if err != nil {
			return nil, err
		}
		return res.Cookies, nil
	})
	if err != nil {
		return nil, "", errors.Join(errors.New("read the page's cookies"), err)
	}
	var ua string
	_ = r.t.eval(ctx, `() => navigator.userAgent`, &ua)
	return cookies, ua, nil
}

// prefix keeps the first max bytes written to it.
type prefix struct {
	b   []byte
	max int
}

func (p *prefix) Write(b []byte) (int, error) {
	if room := p.max - len(p.b); room > 0 {
		p.b = append(p.b, b[:min(room, len(b))]...)
	}
	return len(b), nil
}
