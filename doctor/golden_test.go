package doctor

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/belayhq/belay"
	"github.com/stretchr/testify/require"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// goldenInputs are representative reports whose JSON form is pinned: the
// schema in docs/doctor.md is what these files show.
var goldenInputs = map[string]func() Input{
	// A run in flight after a daemon crash, diagnosed offline from the files.
	"report_offline_stale_lock.json": func() Input {
		in := setup()
		in.Offline = true
		in.Daemon = Daemon{Lock: staleLock()}
		in.Session.Ref = belay.ConversationRef{
			Kind: "openai.response", ID: "resp_68a1b2c3d4e5f60718293a4b5c6d7e8f",
			URL: "https://platform.example.com/logs/resp_68a1b2c3d4e5f60718293a4b5c6d7e8f?key=abc", Cursor: "41",
		}
		in.Journal = Journal{
			Path:       "/data/sessions/" + sesID + "/journal.jsonl",
			BrokenCopy: "/data/sessions/" + sesID + "/journal.jsonl.broken-20261122T115900Z",
		}
		finished(&in, runB, belay.RunComplete, "", 2*time.Hour)
		r := running(&in, runA)
		r.Lease.Owner = incOld + "/w1"
		r.Phase = belay.PhaseToolRunning
		setFacts(&in, runA, RunFacts{LastActivity: ago(4 * time.Minute), InactivityDeadline: now.Add(6 * time.Minute)})
		delivery(&in, dlvA, belay.DeliveryPending, 9).Type = "ui.comment"
		return in
	},
	// A stranded run, with the daemon up.
	"report_stranded.json": func() Input {
		in := setup()
		in.Session.Ref = belay.ConversationRef{Kind: "browser", URL: "https://chatgpt.com/c/68a1b2c3-d4e5-f607-1829-3a4b5c6d7e8f", Target: "A1B2C3D4E5F60718293A4B5C6D7E8F90"}
		finished(&in, runA, belay.RunStranded, belay.ClassTargetLost, 20*time.Minute).Reason = `side-effecting tool "send_email" settled; not resent`
		delivery(&in, dlvA, belay.DeliveryLeased, 4)
		return in
	},
}

func TestGolden(t *testing.T) {
	t.Parallel()
	for name, mk := range goldenInputs {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			got, err := json.MarshalIndent(Diagnose(mk()), "", "  ")
			require.NoError(t, err)
			got = append(got, '\n')
			path := filepath.Join("testdata", name)
			if *update {
				require.NoError(t, os.WriteFile(path, got, 0o644))
			}
			want, err := os.ReadFile(path)
			require.NoError(t, err, "run go test ./doctor -run TestGolden -update")
			require.Equal(t, string(want), string(got))
			require.True(t, bytes.HasSuffix(want, []byte("\n")))
		})
	}
}
