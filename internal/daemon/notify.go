package daemon

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	neturl "net/url"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/store"
)

// Notification events, journaled in the delivery's session so that a
// restart neither loses a notification nor repeats a settled one.
const (
	EventNotifyClaimed = "notify.claimed" // {delivery, target, attempt}
	EventNotifySettled = "notify.settled" // {delivery, target, ok, status, error, attempts}
)

// notifyAttempts bounds the tries of one notification.
const notifyAttempts = 8

type notifyData struct {
	Delivery string `json:"delivery"`
	Target   string `json:"target"`
	Attempt  int    `json:"attempt,omitempty"`
	OK       bool   `json:"ok,omitempty"`
	Status   int    `json:"status,omitempty"`
	Error    string `json:"error,omitempty"`
}

// target is a webhook or an exec hook.
type target struct {
	name     string // stable: "webhook:<url>" or "hook:<argv0>#i"
	sessions []string
	types    []string
	send     func(ctx context.Context, id string, ts time.Time, body []byte) (int, error)
}

func (t *target) wants(d belay.Delivery) bool {
	return (len(t.sessions) == 0 || slices.Contains(t.sessions, d.Session)) &&
		(len(t.types) == 0 || slices.Contains(t.types, d.Type))
}

// notifier sends every matching delivery to every target: claimed and
// settled in the journal, retried with backoff, at least once, and never
// again once settled. Receivers dedupe by the webhook-id header (the
// delivery id and the target).
type notifier struct {
	st      store.Store
	log     *slog.Logger
	targets []*target
	poll    time.Duration

	mu       sync.Mutex
	settled  map[string]bool      // "delivery|target"
	inflight map[string]bool      // being sent
	next     map[string]time.Time // retry not before
	tries    map[string]int
	cancel   context.CancelFunc
	wg       sync.WaitGroup
}

func newNotifier(cfg *Config, st store.Store, log *slog.Logger) *notifier {
	n := &notifier{st: st, log: log, poll: 250 * time.Millisecond,
		settled: map[string]bool{}, inflight: map[string]bool{}, next: map[string]time.Time{}, tries: map[string]int{}}
	client := &http.Client{Timeout: 30 * time.Second}
	for _, w := range cfg.Webhooks {
		secret := w.Secret
		if w.SecretEnv != "" {
			secret = os.Getenv(w.SecretEnv)
		}
		key, err := webhookKey(secret)
		if err != nil {
			log.Error("webhook disabled", "webhook", redactURL(w.URL), "err", err)
			continue
		}
		url := w.URL
		// The name is journaled and logged: a URL can hold credentials, so
		// only its host and a hash of the rest appear.
		n.targets = append(n.targets, &target{name: "webhook:" + redactURL(url) + "#" + shortHash(url), sessions: w.Sessions, types: w.Types,
			send: func(ctx context.Context, id string, ts time.Time, body []byte) (int, error) {
				return postWebhook(ctx, client, url, key, id, ts, body)
			}})
	}
	for i, h := range cfg.Hooks {
		if len(h.Command) == 0 {
			log.Error("hook disabled: empty command")
			continue
		}
		argv, timeout := h.Command, time.Duration(h.Timeout)
		if timeout <= 0 {
			timeout = 30 * time.Second
		}
		n.targets = append(n.targets, &target{name: fmt.Sprintf("hook:%s#%d", argv[0], i), sessions: h.Sessions, types: h.Types,
			send: func(ctx context.Context, id string, _ time.Time, body []byte) (int, error) {
				ctx, cancel := context.WithTimeout(ctx, timeout)
				defer cancel()
				cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
				cmd.Stdin = bytes.NewReader(body)
				cmd.Env = append(os.Environ(), "BELAY_NOTIFICATION_ID="+id)
				out, err := cmd.CombinedOutput()
				if err != nil {
					return 0, fmt.Errorf("%v: %s", err, strings.TrimSpace(string(out)))
				}
				return 0, nil
			}})
	}
	return n
}

// webhookKey decodes a Standard Webhooks secret ("whsec_" + base64).
func webhookKey(secret string) ([]byte, error) {
	s, ok := strings.CutPrefix(secret, "whsec_")
	if !ok {
		return nil, errors.New(`a webhook secret is "whsec_" followed by base64`)
	}
	key, err := base64.StdEncoding.DecodeString(s)
	if err != nil || len(key) < 16 {
		return nil, errors.New("a webhook secret must hold at least 16 bytes of base64")
	}
	return key, nil
}

// Sign returns the Standard Webhooks signature header value for a message.
func Sign(key []byte, id string, ts time.Time, body []byte) string {
	mac := hmac.New(sha256.New, key)
	fmt.Fprintf(mac, "%s.%d.", id, ts.Unix())
	mac.Write(body)
	return "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil))
}

func postWebhook(ctx context.Context, c *http.Client, url string, key []byte, id string, ts time.Time, body []byte) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("webhook-id", id)
	req.Header.Set("webhook-timestamp", strconv.FormatInt(ts.Unix(), 10))
	req.Header.Set("webhook-signature", Sign(key, id, ts, body))
	resp, err := c.Do(req)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return resp.StatusCode, fmt.Errorf("HTTP %d", resp.StatusCode)
	}
	return resp.StatusCode, nil
}

func pairKey(delivery, target string) string { return delivery + "|" + target }

// start loads what was settled before and begins sending.
func (n *notifier) start(ctx context.Context) {
	if len(n.targets) == 0 {
		return
	}
	ctx, n.cancel = context.WithCancel(context.WithoutCancel(ctx))
	if err := n.loadSettled(ctx); err != nil {
		n.log.Error("notifications disabled: cannot read which were settled", "err", err)
		return
	}
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		t := time.NewTicker(n.poll)
		defer t.Stop()
		for {
			n.scan(ctx)
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
}

func (n *notifier) stop() {
	if n.cancel != nil {
		n.cancel()
	}
	n.wg.Wait()
}

// loadSettled reads the settled notifications from the journals. Without
// them nothing may be sent: it would repeat settled notifications.
func (n *notifier) loadSettled(ctx context.Context) error {
	sessions, err := n.st.Sessions(ctx, belay.SessionFilter{})
	if err != nil {
		return err
	}
	for _, s := range sessions {
		var after uint64
		for {
			evs, err := n.st.Events(ctx, s.ID, after, 4096)
			for _, e := range evs {
				after = e.Seq
				if e.Type == EventNotifySettled {
					var d notifyData
					if json.Unmarshal(e.Data, &d) == nil {
						n.settled[pairKey(d.Delivery, d.Target)] = true
					}
				}
			}
			if err != nil {
				return err
			}
			if len(evs) == 0 {
				break
			}
		}
	}
	return nil
}

// scan starts sending what is due.
func (n *notifier) scan(ctx context.Context) {
	ds, err := n.st.Deliveries(ctx, belay.DeliveryFilter{})
	if err != nil {
		return
	}
	now := time.Now()
	for _, d := range ds {
		for _, t := range n.targets {
			if !t.wants(d) {
				continue
			}
			k := pairKey(d.ID, t.name)
			n.mu.Lock()
			due := !n.settled[k] && !n.inflight[k] && !now.Before(n.next[k])
			if due {
				n.inflight[k] = true
				n.tries[k]++
			}
			attempt := n.tries[k]
			n.mu.Unlock()
			if due {
				n.wg.Add(1)
				go func() {
					defer n.wg.Done()
					n.send(ctx, d, t, k, attempt)
				}()
			}
		}
	}
}

// send claims, sends and settles one notification.
func (n *notifier) send(ctx context.Context, d belay.Delivery, t *target, k string, attempt int) {
	defer func() {
		n.mu.Lock()
		delete(n.inflight, k)
		n.mu.Unlock()
	}()
	claim := notifyData{Delivery: d.ID, Target: t.name, Attempt: attempt}
	if _, err := n.st.Append(ctx, d.Session, belay.Sync, belay.Event{Type: EventNotifyClaimed, Data: mustJSON(claim)}); err != nil {
		n.retryLater(k, attempt)
		return
	}
	ts := time.Now()
	body := mustJSON(map[string]any{"type": d.Type, "timestamp": ts.UTC().Format(time.RFC3339), "data": d})
	status, err := t.send(ctx, "msg_"+d.ID+"_"+shortHash(t.name), ts, body)
	if err != nil && ctx.Err() != nil {
		return // stopping: the claim stays unsettled and is retried after a restart
	}
	if err != nil && attempt < notifyAttempts {
		n.log.Warn("notification failed; will retry", "delivery", d.ID, "target", t.name, "attempt", attempt, "err", err)
		n.retryLater(k, attempt)
		return
	}
	res := notifyData{Delivery: d.ID, Target: t.name, OK: err == nil, Status: status, Attempt: attempt}
	if err != nil {
		res.Error = err.Error()
		n.log.Error("notification abandoned", "delivery", d.ID, "target", t.name, "attempts", attempt, "err", err)
	}
	// The settlement's idempotency id makes it once-only in the journal.
	if _, err := n.st.Append(ctx, d.Session, belay.Sync, belay.Event{Type: EventNotifySettled, ID: "notify/" + d.ID + "/" + shortHash(t.name), Data: mustJSON(res)}); err != nil {
		n.retryLater(k, attempt)
		return
	}
	n.mu.Lock()
	n.settled[k] = true
	n.mu.Unlock()
}

func (n *notifier) retryLater(k string, attempt int) {
	d := min(time.Second<<min(attempt-1, 8), 5*time.Minute)
	n.mu.Lock()
	n.next[k] = time.Now().Add(d)
	n.mu.Unlock()
}

// redactURL keeps a URL's scheme and host only.
func redactURL(s string) string {
	u, err := neturl.Parse(s)
	if err != nil || u.Host == "" {
		return "invalid-url"
	}
	return u.Scheme + "://" + u.Host
}

func shortHash(s string) string {
	h := sha256.Sum256([]byte(s))
	return base64.RawURLEncoding.EncodeToString(h[:8])
}

func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}
