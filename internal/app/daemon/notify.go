package daemon

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	neturl "net/url"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/runtime"
	"github.com/belayhq/belay/store"
)

// EventNotifySettled is the event that records a notification's outcome
// in the delivery's session (store.NotificationStore).
const EventNotifySettled = belay.EventNotifySettled

// notifyTargets makes the runtime's notification targets of the
// [[webhooks]] and [[hooks]] config: the runtime claims, sends, retries
// and settles each notification in the store (runtime/notify.go); this
// file only knows how to send.
func notifyTargets(cfg *Config) ([]runtime.NotifyTarget, error) {
	var out []runtime.NotifyTarget
	client := &http.Client{Timeout: runtime.DefaultNotifyTimeout}
	for i, w := range cfg.Webhooks {
		secret := w.Secret
		if w.SecretEnv != "" {
			secret = os.Getenv(w.SecretEnv)
		}
		key, err := webhookKey(secret)
		if err != nil {
			return nil, fmt.Errorf("config: webhooks[%d]: %w", i, err)
		}
		url := w.URL
		// The name is journaled and logged: a URL can hold credentials, so
		// only its host and a hash of the rest appear.
		out = append(out, runtime.NotifyTarget{
			NotificationTarget: store.NotificationTarget{Name: "webhook:" + redactURL(url) + "#" + shortHash(url), Sessions: w.Sessions, Types: w.Types},
			Send: func(ctx context.Context, n runtime.Notice) error {
				return postWebhook(ctx, client, url, key, n.ID, n.At, n.Body)
			},
		})
	}
	for i, h := range cfg.Hooks {
		if len(h.Command) == 0 {
			return nil, fmt.Errorf("config: hooks[%d]: command is empty", i)
		}
		argv := h.Command
		out = append(out, runtime.NotifyTarget{
			NotificationTarget: store.NotificationTarget{Name: fmt.Sprintf("hook:%s#%d", argv[0], i), Sessions: h.Sessions, Types: h.Types},
			Timeout:            time.Duration(h.Timeout),
			Send: func(ctx context.Context, n runtime.Notice) error {
				cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
				cmd.Stdin = bytes.NewReader(n.Body)
				cmd.Env = append(os.Environ(), "BELAY_NOTIFICATION_ID="+n.ID)
				out, err := cmd.CombinedOutput()
				if err != nil {
					return fmt.Errorf("%v: %s", err, strings.TrimSpace(string(out)))
				}
				return nil
			},
		})
	}
	return out, nil
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

func postWebhook(ctx context.Context, c *http.Client, url string, key []byte, id string, ts time.Time, body []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("webhook-id", id)
	req.Header.Set("webhook-timestamp", strconv.FormatInt(ts.Unix(), 10))
	req.Header.Set("webhook-signature", Sign(key, id, ts, body))
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("HTTP %d", resp.StatusCode)
	}
	return nil
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
