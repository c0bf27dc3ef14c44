package doctor

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/apitype"
	"github.com/stretchr/testify/require"
)

// The secrets a session may hold: free text (a prompt, an answer, a tool
// output) and identifier-shaped ones (a token, a cursor, a key). Neither
// may reach a report (G11).
const (
	secretText  = "SECRET prompt: the launch code is 0000, answer with the plan"
	secretToken = "sk-SECRETTOKEN0123456789"
	marker      = "SECRET"
)

// poison writes the secrets into every field of the input that can hold
// prompt, answer or tool text, or a credential.
func poison(in *Input) {
	s := &in.Session
	s.Labels = map[string]string{"note": secretText, secretToken: secretToken}
	s.Options = json.RawMessage(`{"system":"` + secretText + `","apiKey":"` + secretToken + `"}`)
	s.Ref = belay.ConversationRef{
		Kind: "chatgpt", ID: "resp_68a1b2c3d4e5f60718293a4b5c6d7e8f",
		URL:    "https://user:" + secretToken + "@chatgpt.com/c/68a1b2c3-d4e5-f607-1829-3a4b5c6d7e8f?token=" + secretToken + "&q=" + strings.ReplaceAll(secretText, " ", "+") + "#" + secretToken,
		Target: "A1B2C3D4E5F60718293A4B5C6D7E8F90", Cursor: secretToken,
	}
	for i := range in.Runs {
		r := &in.Runs[i]
		r.IdempotencyKey = secretToken
		r.Reason += " " + secretText
		if r.Error != nil {
			r.Error.Message = secretText + " " + secretToken
		}
		r.Ref = s.Ref
	}
	for i := range in.Deliveries {
		d := &in.Deliveries[i]
		d.Data = json.RawMessage(`{"answer":"` + secretText + `","token":"` + secretToken + `"}`)
		d.Key = secretToken
		d.Result = secretText
	}
	in.Deliveries = append(in.Deliveries, belay.Delivery{
		ID: "dlv_poison", Session: sesID, Type: "ui.event", Key: secretToken, Status: belay.DeliveryDone,
		Data: json.RawMessage(`"` + secretText + `"`), Result: secretText, SettledAt: ago(400 * day), CreatedAt: ago(400 * day),
	})
}

// TestNoSecretsInReport runs every decision case with every free-text and
// credential field poisoned, and checks that the report's JSON never holds
// the secrets and that the decision does not depend on them.
func TestNoSecretsInReport(t *testing.T) {
	t.Parallel()
	for _, tc := range diagnoseCases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			in := setup()
			tc.mod(&in)
			clean := Diagnose(in)
			poison(&in)
			rep := Diagnose(in)
			b, err := json.Marshal(rep)
			require.NoError(t, err)
			require.NotContains(t, string(b), marker)
			require.NotContains(t, string(b), "launch code")
			require.Equal(t, clean.NextAction, rep.NextAction)
			require.Equal(t, clean.Rule, rep.Rule)
			require.Equal(t, clean.Command, rep.Command)
		})
	}
}

func TestRedactRef(t *testing.T) {
	t.Parallel()
	in := setup()
	poison(&in)
	ref := Diagnose(in).Ref
	require.Equal(t, apitype.DoctorRef{
		Kind: "chatgpt", ID: "resp_68a...7e8f", URL: "https://chatgpt.com/c/68a1b2c3...7e8f",
		Target: "A1B2C3D4...8F90", HasCursor: true,
	}, ref)
}

func TestRedactURL(t *testing.T) {
	t.Parallel()
	for raw, want := range map[string]string{
		"":                                       "",
		"https://chat.example.com/c/abc":         "https://chat.example.com/c/abc",
		"HTTPS://Chat.Example.com:8443/c/abc/":   "https://chat.example.com:8443/c/abc",
		"https://u:pw@x.example/a?token=t#frag":  "https://x.example/a",
		"https://x.example/share/" + secretToken: "https://x.example/share/sk-SECRE...6789",
	} {
		require.Equal(t, want, redactURL(raw), raw)
	}
	for _, raw := range []string{"not a url", "/relative/path?token=x", "mailto:someone@example.com", "https://exa mple.com/x"} {
		require.True(t, strings.HasPrefix(redactURL(raw), "redacted:"), raw)
	}
}

func TestToken(t *testing.T) {
	t.Parallel()
	for _, s := range []string{"", "openai", "gpt-5-pro", "claude-opus-4@2025", "inc_a/w1", "run.completed", sesID} {
		require.Equal(t, s, token(s))
	}
	for _, s := range []string{secretText, "a b", "x\ny", "quote\"d", strings.Repeat("a", maxToken+1), "ünï"} {
		got := token(s)
		require.True(t, strings.HasPrefix(got, "redacted:"), s)
		require.Equal(t, got, token(s), "stable hash")
	}
}

func TestScrubText(t *testing.T) {
	t.Parallel()
	got := scrubText("open https://h.example/p?sig=" + secretToken + " failed\n\tbadly")
	require.Equal(t, "open https://h.example/p failed  badly", got)
	long := scrubText(strings.Repeat("é", maxText+10))
	require.Equal(t, maxText+3, len([]rune(long)))
}

func TestToolsInReason(t *testing.T) {
	t.Parallel()
	require.Equal(t, []string{"send_email", "git.push"}, toolsInReason(`side-effecting tool "send_email" settled; tool "git.push" too`))
	require.Empty(t, toolsInReason(`tool "has space" and tool send_email`))
	require.Empty(t, toolsInReason(secretText))
}
