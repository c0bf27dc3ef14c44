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
	"sync"
	"time"

	"github.com/chromedp/cdproto/browser"
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
	// Via is how it was downloaded: "fetch" (belay, with the browser's
	// cookies), "page" (the link clicked in the page, the file saved by
	// Chromium's download manager into the artifact directory) or
	// "script" (a blob: or data: URL read in the page).
	Via string `json:"via,omitempty"`
	// Note says why a file was not fetched the first way tried.
	Note  string `json:"note,omitempty"`
	Error string `json:"error,omitempty"`
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
	used := map[string]bool{ManifestName: true, AnswerName: true, downloadsDir: true}
	for k, l := range links {
		a := Artifact{Name: l.Name, URL: l.Href, File: fileName(l.Name, used)}
		inPage := l.Self || !fetchable(l.Href)
		for a.Attempts = 1; ; a.Attempts++ {
			var err error
			if inPage {
				err = r.downloadInPage(ctx, k, filepath.Join(dir, a.File), &a)
			} else {
				err = r.download(ctx, l.Href, filepath.Join(dir, a.File), &a)
				var se *statusError
				if errors.As(err, &se) && (se.code == http.StatusUnauthorized || se.code == http.StatusForbidden) {
					// The site refuses belay's own request but may let its
					// page have the file: from now on, through the page.
					inPage = true
					a.Note = fmt.Sprintf("belay's request was refused (%s): downloaded through the page", se.status)
					err = r.downloadInPage(ctx, k, filepath.Join(dir, a.File), &a)
				}
			}
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
	// Every download was moved to its name or removed: an empty directory
	// is left only if a download never ended.
	_ = os.Remove(filepath.Join(dir, downloadsDir))
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
			return &statusError{url: href, code: resp.StatusCode, status: resp.Status}
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
	a.Via = "fetch"
	if !strings.HasPrefix(href, "http") {
		a.Via = "script"
	}
	return saveFile(body, path, a)
}

// saveFile writes body to path (through a .part file, synced, renamed)
// and records its size, sha256 and detected type.
func saveFile(body io.Reader, path string, a *Artifact) error {
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

// statusError is an artifact request the server answered with another
// status than 200.
type statusError struct {
	url    string
	code   int
	status string
}

func (e *statusError) Error() string { return fmt.Sprintf("GET %s: %s", e.url, e.status) }

// fetchable reports whether belay can request href itself.
func fetchable(href string) bool {
	for _, p := range []string{"http://", "https://", "blob:", "data:"} {
		if strings.HasPrefix(href, p) {
			return true
		}
	}
	return false
}

// downloadsDir is where Chromium saves the downloads of the page, inside
// the run's artifact directory, before each is checked and moved to its
// name.
const downloadsDir = ".downloads"

// downloadBegin bounds the wait for a click to start a download.
const downloadBegin = 30 * time.Second

// downloadInPage downloads artifact k of the answer turn the way a
// person would: it clicks the link in the page, and Chromium's download
// manager saves the file. CDP's Browser.setDownloadBehavior sends it to
// the artifact directory (never ~/Downloads, no download shelf: the
// browser is headless and its downloads are not shown), named by the
// download's guid; Browser.downloadWillBegin and downloadProgress follow
// it. There is no cap but ArtifactTimeout on the download itself: a slow
// file is given its time while it makes progress. The file is then
// hashed and moved to path.
func (r *runState) downloadInPage(ctx context.Context, k int, path string, a *Artifact) error {
	ctx, cancel := context.WithTimeout(ctx, r.p.cfg.ArtifactTimeout)
	defer cancel()
	staging := filepath.Join(filepath.Dir(path), downloadsDir)
	if err := os.MkdirAll(staging, 0o700); err != nil {
		return err
	}
	a.Via = "page"
	var (
		mu       sync.Mutex
		guid     string
		last     browser.EventDownloadProgress
		progress = make(chan struct{}, 1)
	)
	lctx, lcancel := context.WithCancel(r.t.ctx)
	defer lcancel()
	// The listener runs in the tab's read loop: it only records.
	if err := chromedp.Listen(lctx, func(ev any) {
		mu.Lock()
		switch e := ev.(type) {
		case *browser.EventDownloadWillBegin:
			if guid == "" {
				guid = e.GUID
			}
		case *browser.EventDownloadProgress:
			if e.GUID == guid || guid == "" {
				last = *e
			}
		default:
			mu.Unlock()
			return
		}
		mu.Unlock()
		select {
		case progress <- struct{}{}:
		default:
		}
	}); err != nil {
		return err
	}
	yes := true
	if _, err := run(ctx, r.t, evalTimeout, chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		_, err := cdp.Call(ctx, tg, browser.SetDownloadBehavior, browser.SetDownloadBehaviorParams{
			Behavior: browser.SetDownloadBehaviorBehaviorAllowAndName, DownloadPath: staging, EventsEnabled: &yes})
		return err
	})); err != nil {
		return fmt.Errorf("set the browser's downloads to the artifact directory: %w", err)
	}
	if err := r.t.clickArtifact(ctx, r.site, r.cur.Baseline, k); err != nil {
		return fmt.Errorf("click the link: %w", err)
	}
	begin := time.NewTimer(downloadBegin)
	defer begin.Stop()
	for {
		mu.Lock()
		g, p := guid, last
		mu.Unlock()
		if g != "" && p.GUID == g {
			switch p.State {
			case browser.DownloadProgressStateCompleted:
				return r.savePageDownload(filepath.Join(staging, g), path, int64(p.ReceivedBytes), a)
			case browser.DownloadProgressStateCanceled:
				_ = os.Remove(filepath.Join(staging, g))
				return fmt.Errorf("the browser's download stopped after %.0f of %.0f bytes", p.ReceivedBytes, p.TotalBytes)
			}
		}
		select {
		case <-progress:
		case <-begin.C:
			if g == "" {
				return fmt.Errorf("clicking the link started no download in %s", downloadBegin)
			}
		case <-ctx.Done():
			if g != "" {
				_, _ = run(context.Background(), r.t, evalTimeout, chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
					_, err := cdp.Call(ctx, tg, browser.CancelDownload, browser.CancelDownloadParams{GUID: g})
					return err
				})) // best effort: the browser is closed when the run ends
				_ = os.Remove(filepath.Join(staging, g))
			}
			return ctx.Err()
		}
	}
}

// savePageDownload checks the file the browser saved (its size as the
// browser reported it) and moves it to path with its size, sha256 and
// type recorded.
func (r *runState) savePageDownload(saved, path string, size int64, a *Artifact) error {
	f, err := os.Open(saved)
	if err != nil {
		return fmt.Errorf("the browser's download: %w", err)
	}
	err = saveFile(f, path, a)
	f.Close()
	if err == nil && a.Size != size {
		err = fmt.Errorf("the browser saved %d bytes, it reported %d", a.Size, size)
		_ = os.Remove(path) // the error above is what is reported; a leftover is in the run's own directory
	}
	_ = os.Remove(saved) // moved or refused: the copy in path is what counts
	if err != nil {
		a.Size, a.SHA256, a.Type = 0, "", ""
	}
	return err
}
