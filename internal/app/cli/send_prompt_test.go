package cli

import (
	"errors"
	"strings"
	"testing"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/runtime"
)

func TestReadPromptGivesTheWholeSize(t *testing.T) {
	b, err := readPrompt(strings.NewReader(strings.Repeat("a", runtime.MaxInput)), "p")
	if err != nil || len(b) != runtime.MaxInput {
		t.Fatalf("a prompt at the limit: %d bytes, %v", len(b), err)
	}
	size := 3 * runtime.MaxInput
	_, err = readPrompt(strings.NewReader(strings.Repeat("a", size)), "the prompt in big.txt")
	var tl *belay.TooLargeError
	if !errors.As(err, &tl) || tl.Size != size || tl.Limit != runtime.MaxInput || !errors.Is(err, belay.ErrTooLarge) {
		t.Fatalf("want a TooLargeError of %d bytes, got %v", size, err)
	}
	if !strings.Contains(err.Error(), "big.txt") {
		t.Fatalf("the error does not name the file: %v", err)
	}
}
