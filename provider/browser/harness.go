package browser

import (
	"context"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
)

// Harness hooks: what goes wrong with a run's tab, done on purpose by
// tests and benchmarks through the browser's DevTools address (a run's
// cursor holds it). CloseTarget is in chrome.go.

// CrashTarget crashes the renderer of a target, as an out-of-memory kill
// of the tab would.
func CrashTarget(ctx context.Context, ws, id string) error {
	t, err := attach(ctx, &chrome{WS: ws}, id, DefaultStartTimeout)
	if err != nil {
		return err
	}
	defer t.close()
	// The crash cuts the call short: its error is expected.
	_, _ = run(ctx, t, time.Second, chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		_, err := cdp.Call(ctx, tg, page.Crash, cdp.Empty{})
		return err
	}))
	return nil
}

// NavigateTarget points a target at another URL, as a person clicking
// another conversation in the run's tab would.
func NavigateTarget(ctx context.Context, ws, id, url string) error {
	t, err := attach(ctx, &chrome{WS: ws}, id, DefaultStartTimeout)
	if err != nil {
		return err
	}
	defer t.close()
	return t.navigate(ctx, url)
}
