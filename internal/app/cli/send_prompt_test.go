package cli

import (
	"errors"
	"strings"
	"testing"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/runtime"
)

func TestReadPromptGivesTheWholeSize(t *testing.T) {
	b, err := readPrompt(strings.NewReader(strings.Repeat("a", runtime.MaxInput)), "p", -1)
	if err != nil || len(b) != runtime.MaxInput {
		t.Fatalf("a prompt at the limit: %d bytes, %v", len(b), err)
	}
	size := 3 * runtime.MaxInput
	_, err = readPrompt(strings.NewReader(strings.Repeat("a", size)), "the prompt in big.txt", int64(size))
	var tl *belay.TooLargeError
	if !errors.As(err, &tl) || tl.Size != size || tl.Limit != runtime.MaxInput || !errors.Is(err, belay.ErrTooLarge) {
		t.Fatalf("want a TooLargeError of %d bytes, got %v", size, err)
	}
	if !strings.Contains(err.Error(), "big.txt") {
		t.Fatalf("the error does not name the file: %v", err)
	}
	// A stream of unknown length is not read to its end (it may not have
	// one): it is refused as more than the limit.
	_, err = readPrompt(endless{}, "the prompt on standard input", -1)
	if !errors.Is(err, belay.ErrTooLarge) || !strings.Contains(err.Error(), "more than") {
		t.Fatalf("an endless stream: %v", err)
	}
}

// endless is a reader that never ends.
type endless struct{}

func (endless) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = 'y'
	}
	return len(p), nil
}
