package browser

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/cdproto/target"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/remote"
)

// tab is a connection to one page target of a browser. Closing it
// detaches: the page and the browser go on.
type tab struct {
	id          string
	ctx         context.Context // the chromedp context of the target
	cancel      context.CancelFunc
	allocCancel context.CancelFunc
}

// attachNew connects to the browser and opens a new page target, within
// timeout.
func attachNew(ctx context.Context, b *chrome, timeout time.Duration) (*tab, error) {
	return connect(ctx, b, "", timeout)
}

// attach connects to the browser at ws and to its page target id; an
// empty id takes the browser's first page, or opens one. A browser that
// does not answer within timeout is given up.
func attach(ctx context.Context, b *chrome, id string, timeout time.Duration) (*tab, error) {
	if id == "" {
		ts, err := b.targets(ctx)
		if err != nil {
			return nil, err
		}
		for _, t := range ts {
			if t.Type == "page" {
				id = t.ID
				break
			}
		}
	}
	return connect(ctx, b, id, timeout)
}

// connect attaches to target id of the browser, or to a new one if id is
// empty.
func connect(ctx context.Context, b *chrome, id string, timeout time.Duration) (*tab, error) {
	// The connection lives until close, not as long as ctx.
	allocCtx, allocCancel := remote.NewAllocator(context.WithoutCancel(ctx), b.WS, remote.NoModifyURL)
	opts := []chromedp.ContextOption{chromedp.WithDetachOnCancel()}
	if id != "" {
		opts = append(opts, chromedp.WithTargetID(target.ID(id)))
	}
	tctx, cancel := chromedp.NewContext(allocCtx, opts...)
	t := &tab{ctx: tctx, cancel: cancel, allocCancel: allocCancel}
	// The first Run binds the connection to the context it gets: it must
	// be the tab's own, not one with a timeout. A stuck attach is bounded
	// by closing the tab.
	var stuck atomic.Bool
	timer := time.AfterFunc(timeout, func() {
		stuck.Store(true)
		cancel()
	})
	err := chromedp.Do(tctx)
	timer.Stop()
	if err != nil {
		t.close()
		if stuck.Load() && ctx.Err() == nil {
			return nil, fmt.Errorf("the browser did not answer in %s", timeout)
		}
		return nil, err
	}
	t.id = string(chromedp.FromContext(tctx).Target.TargetID)
	if err := t.hookCopies(ctx); err != nil {
		t.close()
		return nil, err
	}
	return t, nil
}

// copyHookJS records what the page copies instead of letting it reach the
// clipboard: navigator.clipboard.writeText and write, and
// document.execCommand("copy") (with the copy event a page may fill, else
// the selected text). The OS clipboard is never read or written. The
// records are in window.__belayCopies, newest last.
const copyHookJS = `(() => {
  if (window.__belayCopies) return;
  const log = [];
  Object.defineProperty(window, "__belayCopies", { value: log });
  const keep = (t) => { log.push(String(t)); if (log.length > 20) log.shift(); };
  const cb = navigator.clipboard;
  if (cb) {
    cb.writeText = (t) => { keep(t); return Promise.resolve(); };
    cb.write = async (items) => {
      for (const it of items || []) {
        if (it.types && it.types.includes("text/plain")) keep(await (await it.getType("text/plain")).text());
      }
    };
  }
  const exec = document.execCommand.bind(document);
  document.execCommand = (cmd, ...rest) => {
    if (String(cmd).toLowerCase() !== "copy") return exec(cmd, ...rest);
    const dt = new DataTransfer();
    const ev = new ClipboardEvent("copy", { clipboardData: dt, bubbles: true, cancelable: true });
    (document.activeElement || document).dispatchEvent(ev);
    let t = dt.getData("text/plain");
    if (!ev.defaultPrevented || t === "") {
      const a = document.activeElement;
      if (a && (a.tagName === "TEXTAREA" || a.tagName === "INPUT") && a.selectionStart !== a.selectionEnd) {
        t = a.value.substring(a.selectionStart, a.selectionEnd);
      } else {
        t = String(document.getSelection() || "");
      }
    }
    keep(t);
    return true;
  };
})()`

// hookCopies installs copyHookJS in the tab's documents from now on,
// before their own scripts, and in the one it shows now.
func (t *tab) hookCopies(ctx context.Context) error {
	_, err := run(ctx, t, evalTimeout, chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		if _, err := cdp.Call(ctx, tg, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{Source: copyHookJS}); err != nil {
			return err
		}
		_, err := cdp.Call(ctx, tg, runtime.Evaluate, runtime.EvaluateParams{Expression: copyHookJS})
		return err
	}))
	return err
}

func (t *tab) close() {
	t.cancel()
	t.allocCancel()
}

// run runs an action on the tab, bounded by d and by ctx.
func run[T any](ctx context.Context, t *tab, d time.Duration, a chromedp.Action[T]) (T, error) {
	c, cancel := context.WithTimeout(t.ctx, d)
	defer cancel()
	stop := context.AfterFunc(ctx, cancel)
	defer stop()
	return chromedp.Run(c, a)
}

func (t *tab) navigate(ctx context.Context, url string) error {
	_, err := run(ctx, t, 60*time.Second, chromedp.Steps(chromedp.Navigate(url)))
	return err
}

func (t *tab) reload(ctx context.Context) error {
	_, err := run(ctx, t, 60*time.Second, chromedp.Steps(chromedp.Reload()))
	return err
}

// evalTimeout bounds one page evaluation: they take milliseconds, and a
// crashed renderer never answers.
const evalTimeout = 5 * time.Second

// eval evaluates a JS function of the site profile and args, and decodes
// its JSON result into out.
func (t *tab) eval(ctx context.Context, fn string, out any, args ...any) error {
	parts := make([]string, len(args))
	for i, a := range args {
		b, err := json.Marshal(a)
		if err != nil {
			return err
		}
		parts[i] = string(b)
	}
	// An async function's promise is awaited.
	expr := "(async () => JSON.stringify(await (" + fn + ")(" + strings.Join(parts, ",") + ")))()"
	s, err := run(ctx, t, evalTimeout, chromedp.Evaluate[string](expr, chromedp.EvalAwaitPromise))
	if err != nil {
		return err
	}
	return json.Unmarshal([]byte(s), out)
}

// insertText types text where the focus is, as an IME would.
func (t *tab) insertText(ctx context.Context, text string) error {
	_, err := run(ctx, t, 30*time.Second, chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		_, err := cdp.Call(ctx, tg, input.InsertText, input.InsertTextParams{Text: text})
		return err
	}))
	return err
}

// pressEnter sends an Enter key press to the focused element.
func (t *tab) pressEnter(ctx context.Context) error {
	_, err := run(ctx, t, 10*time.Second, chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		for _, typ := range []input.DispatchKeyEventType{input.DispatchKeyEventTypeKeyDown, input.DispatchKeyEventTypeKeyUp} {
			p := input.DispatchKeyEventParams{Type: typ, Key: "Enter", Code: "Enter", WindowsVirtualKeyCode: 13, NativeVirtualKeyCode: 13}
			if typ == input.DispatchKeyEventTypeKeyDown {
				p.Text = "\r"
			}
			if _, err := cdp.Call(ctx, tg, input.DispatchKeyEvent, p); err != nil {
				return err
			}
		}
		return nil
	}))
	return err
}

// jsLib is the helpers every page function starts with.
const jsLib = `
const vis = (e) => !!e && !!(e.offsetWidth || e.offsetHeight || e.getClientRects().length);
const q = (root, s) => { if (!s) return null; try { return root.querySelector(s); } catch (e) { return null; } };
const qa = (root, s) => { if (!s) return []; try { return Array.from(root.querySelectorAll(s)); } catch (e) { return []; } };
const anyVis = (root, s) => qa(root, s).some(vis);
`

// probe is what the page shows, for the classifier and for check.
type probe struct {
	URL       string         `json:"url"`
	Title     string         `json:"title"`
	Text      string         `json:"text"` // page text outside the turns, capped
	Match     map[string]int `json:"match"`
	Assistant int            `json:"assistant"`
	Users     int            `json:"users"`
	Modal     bool           `json:"modal"`
	Ready     string         `json:"readyState"`
}

const probeJS = `(p) => {` + jsLib + `
  const match = {};
  const turns = qa(document, p.assistantTurn);
  const last = turns[turns.length - 1];
  const inTurn = {turnText: 1, thinking: 1, actionBar: 1, copy: 1, errorTurn: 1, retry: 1, artifact: 1};
  for (const [k, s] of Object.entries(p)) {
    if (!s) continue;
    match[k] = inTurn[k] ? (last ? qa(last, s).length : 0) : qa(document, s).length;
  }
  let text = "";
  if (document.body) {
    const c = document.body.cloneNode(true);
    for (const s of [p.assistantTurn, p.userTurn]) qa(c, s).forEach((e) => e.remove());
    text = (c.textContent || "").replace(/\s+/g, " ").slice(0, 20000);
  }
  return { url: location.href, title: document.title, text, match,
    assistant: turns.length, users: qa(document, p.userTurn).length,
    modal: anyVis(document, p.modal), readyState: document.readyState };
}`

func (t *tab) probe(ctx context.Context, s *Site) (probe, error) {
	var p probe
	err := t.eval(ctx, probeJS, &p, s.Selectors)
	return p, err
}

// turnState is what one assistant turn shows.
type turnState struct {
	URL       string     `json:"url"`
	Assistant int        `json:"assistant"`
	Exists    bool       `json:"exists"`
	Text      string     `json:"text"`
	Thinking  bool       `json:"thinking"`
	ActionBar bool       `json:"actionBar"`
	Error     bool       `json:"error"`
	Stop      bool       `json:"stop"`
	Artifacts []linkInfo `json:"artifacts"`
}

type linkInfo struct {
	Name string `json:"name"`
	Href string `json:"href"`
	// Self: the link names the page itself (href="#..."): only the page's
	// script can make its download.
	Self bool `json:"self,omitempty"`
}

const turnJS = `(p, i) => {` + jsLib + `
  const turns = qa(document, p.assistantTurn);
  const r = { url: location.href, assistant: turns.length, exists: false, text: "", thinking: false,
    actionBar: false, error: false, stop: anyVis(document, p.stop), artifacts: [] };
  const t = turns[i];
  if (!t) return r;
  r.exists = true;
  r.thinking = anyVis(t, p.thinking);
  const body = p.turnText ? q(t, p.turnText) : t;
  if (body && !r.thinking) r.text = body.innerText || "";
  r.actionBar = anyVis(t, p.copy) || anyVis(t, p.actionBar);
  r.error = anyVis(t, p.errorTurn) || anyVis(t, p.retry);
  r.artifacts = qa(t, p.artifact).map((a) => ({ name: a.getAttribute("download") || a.textContent.trim(), href: a.href,
    self: a.href.split("#")[0] === location.href.split("#")[0] }));
  return r;
}`

func (t *tab) turn(ctx context.Context, s *Site, i int) (turnState, error) {
	var ts turnState
	err := t.eval(ctx, turnJS, &ts, s.Selectors, i)
	return ts, err
}

// copyClickJS clicks the copy button of assistant turn i and returns how
// many copies the page had recorded before, or why it could not.
const copyClickJS = `(p, i) => {` + jsLib + `
  const t = qa(document, p.assistantTurn)[i];
  if (!t) return { n: -1, why: "the turn is gone" };
  if (!p.copy) return { n: -1, why: "the site profile names no copy button" };
  const b = qa(t, p.copy).find(vis);
  if (!b) return { n: -1, why: "the turn shows no copy button" };
  const log = window.__belayCopies;
  if (!log) return { n: -1, why: "the copy hook is not in the page" };
  const n = log.length;
  b.click();
  return { n, why: "" };
}`

const copiedJS = `(n) => {
  const log = window.__belayCopies;
  return log && log.length > n ? log[log.length - 1] : null;
}`

// copyTurn clicks the copy button of assistant turn i and returns what
// the page copied, intercepted by copyHookJS. An empty why with an empty
// text means the page copied nothing in time.
func (t *tab) copyTurn(ctx context.Context, s *Site, i int, wait time.Duration) (text, why string, err error) {
	var c struct {
		N   int    `json:"n"`
		Why string `json:"why"`
	}
	if err := t.eval(ctx, copyClickJS, &c, s.Selectors, i); err != nil {
		return "", "", err
	}
	if c.N < 0 {
		return "", c.Why, nil
	}
	deadline := time.Now().Add(wait)
	for {
		var got *string
		if err := t.eval(ctx, copiedJS, &got, c.N); err != nil {
			return "", "", err
		}
		if got != nil {
			return *got, "", nil
		}
		if time.Now().After(deadline) {
			return "", fmt.Sprintf("the copy button copied nothing in %s", wait), nil
		}
		if err := sleep(ctx, 50*time.Millisecond); err != nil {
			return "", "", err
		}
	}
}

// clickArtifactJS clicks artifact link k of assistant turn i, and says
// why it could not.
const clickArtifactJS = `(p, i, k) => {` + jsLib + `
  const t = qa(document, p.assistantTurn)[i];
  if (!t) return "the turn is gone";
  const a = qa(t, p.artifact)[k];
  if (!a) return "the link is gone";
  a.click();
  return "";
}`

// clickArtifact clicks artifact link k of assistant turn i.
func (t *tab) clickArtifact(ctx context.Context, s *Site, i, k int) error {
	var why string
	if err := t.eval(ctx, clickArtifactJS, &why, s.Selectors, i, k); err != nil {
		return err
	}
	if why != "" {
		return errors.New(why)
	}
	return nil
}

// userTurns returns the texts of the user turns from index from.
const userTurnsJS = `(p, from) => {` + jsLib + `
  return qa(document, p.userTurn).slice(from).map((e) => e.innerText || "");
}`

func (t *tab) userTurns(ctx context.Context, s *Site, from int) ([]string, error) {
	var out []string
	err := t.eval(ctx, userTurnsJS, &out, s.Selectors, from)
	return out, err
}

// focusComposer focuses the composer and empties it; it returns what the
// composer holds afterwards.
const focusJS = `(p) => {` + jsLib + `
  const c = q(document, p.composer);
  if (!c) return { ok: false, text: "" };
  c.focus();
  if ("value" in c && (c.tagName === "TEXTAREA" || c.tagName === "INPUT")) {
    c.value = "";
    c.dispatchEvent(new Event("input", { bubbles: true }));
  } else {
    const sel = window.getSelection(); const r = document.createRange();
    r.selectNodeContents(c); sel.removeAllRanges(); sel.addRange(r);
    document.execCommand("delete");
  }
  return { ok: true, text: ("value" in c && c.tagName !== "DIV") ? c.value : c.innerText };
}`

const composerJS = `(p) => {` + jsLib + `
  const c = q(document, p.composer);
  if (!c) return null;
  return ("value" in c && c.tagName !== "DIV") ? c.value : c.innerText;
}`

// clickSendJS clicks the send control if it is there and enabled.
const clickSendJS = `(p) => {` + jsLib + `
  const b = qa(document, p.send).find(vis);
  if (!b) return "missing";
  if (b.disabled || b.getAttribute("aria-disabled") === "true") return "disabled";
  b.click();
  return "clicked";
}`

// clickJS clicks the first visible element matching a selector.
const clickJS = `(s) => {` + jsLib + `
  const b = qa(document, s).find(vis);
  if (!b) return false;
  b.click();
  return true;
}`

func (t *tab) click(ctx context.Context, sel string) (bool, error) {
	var ok bool
	err := t.eval(ctx, clickJS, &ok, sel)
	return ok, err
}

// selectModelJS picks a model in the site's model picker: an option of a
// <select>, or the menu item (model_option, else ARIA menu items and
// options) whose text names it.
const selectModelJS = `async (p, model) => {` + jsLib + `
  const want = model.toLowerCase();
  const has = (e) => (e.textContent || "").toLowerCase().includes(want) || (e.value || "").toLowerCase() === want;
  const picker = qa(document, p.modelPicker).find(vis) || q(document, p.modelPicker);
  if (!picker) return { ok: false, why: "the model picker is not on the page" };
  if (picker.tagName === "SELECT") {
    const opts = Array.from(picker.options);
    const opt = opts.find((o) => o.value.toLowerCase() === want || o.text.toLowerCase() === want) || opts.find(has);
    if (!opt) return { ok: false, offered: opts.map((o) => o.text), why: "no option " + model + " (there are: " + opts.map((o) => o.text).join(", ") + ")" };
    picker.value = opt.value;
    picker.dispatchEvent(new Event("change", { bubbles: true }));
    return { ok: true, chosen: opt.text };
  }
  if (has(picker)) return { ok: true, chosen: picker.textContent.trim() };
  picker.click();
  const sel = p.modelOption || "[role=menuitem], [role=menuitemradio], [role=option]";
  for (let i = 0; i < 25; i++) {
    await new Promise((r) => setTimeout(r, 100));
    const item = qa(document, sel).filter(vis).find(has);
    if (item) { item.click(); return { ok: true, chosen: item.textContent.trim() }; }
  }
  document.dispatchEvent(new KeyboardEvent("keydown", { key: "Escape", bubbles: true }));
  return { ok: false, why: "no menu item names " + model };
}`

// selectModel picks model in the site's model picker.
func (t *tab) selectModel(ctx context.Context, s *Site, model string) error {
	var res struct {
		OK      bool     `json:"ok"`
		Why     string   `json:"why"`
		Chosen  string   `json:"chosen"`
		Offered []string `json:"offered"`
	}
	if err := t.eval(ctx, selectModelJS, &res, s.Selectors, model); err != nil {
		return err
	}
	if !res.OK {
		if len(res.Offered) > 0 {
			return &modelMissingError{model: model, offered: res.Offered}
		}
		return fmt.Errorf("%s", res.Why)
	}
	return nil
}

// modelMissingError is a model the site's picker (a list of options it
// read) does not offer: the request's fault, not the profile's.
type modelMissingError struct {
	model   string
	offered []string
}

func (e *modelMissingError) Error() string {
	return fmt.Sprintf("no option %s (there are: %s)", e.model, strings.Join(e.offered, ", "))
}

// setFiles sets the files of a file input.
func (t *tab) setFiles(ctx context.Context, sel string, files []string) error {
	_, err := run(ctx, t, 30*time.Second, chromedp.SetUploadFiles(chromedp.CSS(sel), files, chromedp.NodeReady))
	return err
}

// chipState counts the upload chips in the page.
type chipState struct {
	Chips  int  `json:"chips"`
	Done   int  `json:"done"`
	Failed bool `json:"failed"`
}

const chipsJS = `(p, errs) => {` + jsLib + `
  const chips = qa(document, p.fileChip);
  const failed = qa(document, p.fileChipError).length > 0 ||
    chips.some((c) => errs.some((e) => (c.textContent || "").toLowerCase().includes(e.toLowerCase())));
  return { chips: chips.length, done: qa(document, p.fileChipDone).length, failed };
}`

func (t *tab) chips(ctx context.Context, s *Site) (chipState, error) {
	var st chipState
	errs := s.Signals.UploadErrorText
	if errs == nil {
		errs = []string{}
	}
	err := t.eval(ctx, chipsJS, &st, s.Selectors, errs)
	return st, err
}

// normalize folds whitespace, so a prompt can be recognised in a page
// that renders it differently.
func normalize(s string) string { return strings.Join(strings.Fields(s), " ") }

// samePrompt reports whether a user turn's text is the prompt.
func samePrompt(turn, prompt string) bool {
	a, b := normalize(turn), normalize(prompt)
	return a == b || (len(b) > 200 && strings.HasPrefix(a, b[:200]))
}

// typePrompt fills the composer with prompt and checks that it holds it.
func (t *tab) typePrompt(ctx context.Context, s *Site, prompt string) error {
	var f struct {
		OK bool `json:"ok"`
	}
	if err := t.eval(ctx, focusJS, &f, s.Selectors); err != nil {
		return err
	}
	if !f.OK {
		return fmt.Errorf("no composer (%s)", s.Selectors.Composer)
	}
	if err := t.insertText(ctx, prompt); err != nil {
		return err
	}
	var got *string
	if err := t.eval(ctx, composerJS, &got, s.Selectors); err != nil {
		return err
	}
	if got == nil || normalize(*got) != normalize(prompt) {
		return fmt.Errorf("the composer does not hold the prompt after typing")
	}
	return nil
}

// submit clicks send (or presses Enter when the site has no send control
// selector), waiting up to d for the control to be enabled.
func (t *tab) submit(ctx context.Context, s *Site, d time.Duration) error {
	if s.Selectors.Send == "" {
		return t.pressEnter(ctx)
	}
	deadline := time.Now().Add(d)
	for {
		var r string
		if err := t.eval(ctx, clickSendJS, &r, s.Selectors); err != nil {
			return err
		}
		if r == "clicked" {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the send control (%s) is %s", s.Selectors.Send, r)
		}
		if err := sleep(ctx, 100*time.Millisecond); err != nil {
			return err
		}
	}
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
