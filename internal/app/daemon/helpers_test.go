package daemon

import (
	"fmt"

	"github.com/belayhq/belay/apitype"
)

func apiRunRequest(prompt string) apitype.CreateRunRequest {
	return apitype.CreateRunRequest{Provider: "fake", Prompt: prompt}
}

func fmtSscan(s string, v *int64) (int, error) { return fmt.Sscan(s, v) }
