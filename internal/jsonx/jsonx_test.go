package jsonx

import "testing"

func TestMust(t *testing.T) {
	t.Parallel()
	if got := string(Must(struct {
		A int    `json:"a"`
		B string `json:"b,omitempty"`
	}{A: 1})); got != `{"a":1}` {
		t.Fatalf("Must = %s", got)
	}
	defer func() {
		if recover() == nil {
			t.Fatal("Must of a channel did not panic")
		}
	}()
	Must(make(chan int))
}
