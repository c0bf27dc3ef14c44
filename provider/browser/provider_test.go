package browser

import (
	"context"
	"testing"
	"time"

	"github.com/belayhq/belay/internal/chatsite"
	"github.com/belayhq/belay/provider"
)

func TestRunAnswersOnce(t *testing.T) {
	b := setup(t, 4)
	prompt := "Explain fencing tokens. [[think=2s pause=1s stream=2s words=40]]"
	var rec recorder
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	err := b.p.Run(ctx, provider.Request{Session: "ses_a", Run: "run_a", Prompt: prompt, Attempt: 1}, rec.emit)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := chatsite.AnswerText(prompt)
	if got := rec.answer(); got != want {
		t.Fatalf("answer:\n got %q\nwant %q", got, want)
	}
	if n := b.site.Count(prompt); n != 1 {
		t.Fatalf("the site received the prompt %d times", n)
	}
	c := refCursor(*rec.ref.Ref)
	if c.Phase != phaseDone || rec.ref.Ref.ID == "" || rec.ref.Ref.Target == "" {
		t.Fatalf("final ref %+v cursor %+v", rec.ref.Ref, c)
	}
	if n := chromiumCount(t, b.dir); n != 0 {
		t.Fatalf("%d browser processes left", n)
	}
}
