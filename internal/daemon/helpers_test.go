package daemon

import (
	"fmt"

	"github.com/belayhq/belay/api"
)

func apiRunRequest(prompt string) api.CreateRunRequest {
	return api.CreateRunRequest{Provider: "fake", Prompt: prompt}
}

func fmtSscan(s string, v *int64) (int, error) { return fmt.Sscan(s, v) }
