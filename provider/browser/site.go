package browser

import (
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/BurntSushi/toml"
)

// Site is a chat web UI described as data: where it starts, what its
// conversation URLs look like, the selectors of its controls, the text
// and URL signals of each page state, and when an answer is complete.
// One TOML file per site; the defaults are embedded, and a file of the
// same name in the sites directory overrides one or adds a site without a
// rebuild.
type Site struct {
	Name     string `toml:"name" json:"name"`
	StartURL string `toml:"start_url" json:"startUrl"`
	// ConversationPath is a regexp on the URL path of a conversation; its
	// first group is the conversation id.
	ConversationPath string     `toml:"conversation_path" json:"conversationPath"`
	Selectors        Selectors  `toml:"selectors" json:"selectors"`
	Signals          Signals    `toml:"signals" json:"signals"`
	Completion       Completion `toml:"completion" json:"completion"`
	// Source is where the profile was read from ("embedded" or a path).
	Source string `toml:"-" json:"source"`

	convRE *regexp.Regexp
}

// Selectors are CSS selectors of a site's controls. Turn-relative ones
// (turn_text, thinking, action_bar, copy, error_turn, retry, artifact) are
// looked up inside an assistant turn.
type Selectors struct {
	Composer      string `toml:"composer" json:"composer"`
	Send          string `toml:"send" json:"send"`
	Stop          string `toml:"stop" json:"stop"`
	AssistantTurn string `toml:"assistant_turn" json:"assistantTurn"`
	UserTurn      string `toml:"user_turn" json:"userTurn"`
	TurnText      string `toml:"turn_text" json:"turnText"`
	Thinking      string `toml:"thinking" json:"thinking"`
	ActionBar     string `toml:"action_bar" json:"actionBar"`
	Copy          string `toml:"copy" json:"copy"`
	ErrorTurn     string `toml:"error_turn" json:"errorTurn"`
	Retry         string `toml:"retry" json:"retry"`
	ModelPicker   string `toml:"model_picker" json:"modelPicker"`
	// ModelOption selects the items of the picker's menu (default: ARIA
	// menu items and options); the one whose text names the run's model
	// is clicked.
	ModelOption string `toml:"model_option" json:"modelOption"`
	UploadInput string `toml:"upload_input" json:"uploadInput"`
	FileChip    string `toml:"file_chip" json:"fileChip"`
	// FileChipDone and FileChipError select the chips of finished and
	// failed uploads; without them an upload is done when there is a chip
	// per file and no upload_error_text.
	FileChipDone  string `toml:"file_chip_done" json:"fileChipDone"`
	FileChipError string `toml:"file_chip_error" json:"fileChipError"`
	Artifact      string `toml:"artifact" json:"artifact"`
	Modal         string `toml:"modal" json:"modal"`
	ModalDismiss  string `toml:"modal_dismiss" json:"modalDismiss"`
}

// Signals say which page state a page is in.
type Signals struct {
	// Ready names the selectors (by their TOML key) that must all match
	// for the page to be ready.
	Ready          []string `toml:"ready" json:"ready"`
	LoginURL       []string `toml:"login_url" json:"loginUrl"`
	LoginText      []string `toml:"login_text" json:"loginText"`
	ChallengeText  []string `toml:"challenge_text" json:"challengeText"`
	OutageText     []string `toml:"outage_text" json:"outageText"`
	RateLimitText  []string `toml:"rate_limit_text" json:"rateLimitText"`
	PlaceholderTxt []string `toml:"placeholder_text" json:"placeholderText"`
	// UploadErrorText is text of a failed upload's chip.
	UploadErrorText []string `toml:"upload_error_text" json:"uploadErrorText"`
}

// Completion says when an answer is finished: the turn's action bar was
// present for StablePolls polls in a row and its text did not change for
// Settle.
type Completion struct {
	StablePolls int      `toml:"stable_polls" json:"stablePolls"`
	Settle      duration `toml:"settle" json:"settle"`
}

type duration time.Duration

func (d *duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	if err != nil {
		return err
	}
	*d = duration(v)
	return nil
}

func (d duration) MarshalText() ([]byte, error) { return []byte(time.Duration(d).String()), nil }

// ErrSite reports an unknown or invalid site profile.
var ErrSite = errors.New("browser: site profile")

//go:embed sites/*.toml
var embedded embed.FS

// selectorKeys maps the TOML keys of Selectors to their values.
func (s *Selectors) byKey() map[string]string {
	return map[string]string{
		"composer": s.Composer, "send": s.Send, "stop": s.Stop,
		"assistant_turn": s.AssistantTurn, "user_turn": s.UserTurn, "turn_text": s.TurnText,
		"thinking": s.Thinking, "action_bar": s.ActionBar, "copy": s.Copy,
		"error_turn": s.ErrorTurn, "retry": s.Retry, "model_picker": s.ModelPicker, "model_option": s.ModelOption,
		"upload_input": s.UploadInput, "file_chip": s.FileChip,
		"file_chip_done": s.FileChipDone, "file_chip_error": s.FileChipError, "artifact": s.Artifact,
		"modal": s.Modal, "modal_dismiss": s.ModalDismiss,
	}
}

// ParseSite reads a site profile.
func ParseSite(data []byte, source string) (*Site, error) {
	var s Site
	md, err := toml.Decode(string(data), &s)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrSite, source, err)
	}
	if u := md.Undecoded(); len(u) > 0 {
		return nil, fmt.Errorf("%w: %s: unknown key %q", ErrSite, source, u[0].String())
	}
	s.Source = source
	if err := s.validate(); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrSite, source, err)
	}
	return &s, nil
}

func (s *Site) validate() error {
	switch {
	case s.Name == "":
		return errors.New("name is empty")
	case s.Selectors.Composer == "" || s.Selectors.AssistantTurn == "" || s.Selectors.UserTurn == "":
		return errors.New("selectors composer, assistant_turn and user_turn are required")
	case s.ConversationPath == "":
		return errors.New("conversation_path is empty")
	}
	u, err := url.Parse(s.StartURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("start_url %q is not an http(s) URL", s.StartURL)
	}
	if s.convRE, err = regexp.Compile(s.ConversationPath); err != nil {
		return fmt.Errorf("conversation_path: %v", err)
	}
	if s.convRE.NumSubexp() < 1 {
		return errors.New("conversation_path needs a group for the conversation id")
	}
	keys := s.Selectors.byKey()
	for _, k := range s.Signals.Ready {
		if v, ok := keys[k]; !ok || v == "" {
			return fmt.Errorf("signals.ready names %q, which is not a set selector", k)
		}
	}
	if s.Completion.StablePolls <= 0 {
		s.Completion.StablePolls = 3
	}
	if s.Completion.Settle <= 0 {
		s.Completion.Settle = duration(2 * time.Second)
	}
	return nil
}

// Conversation returns the conversation id in a URL of the site, or "".
func (s *Site) Conversation(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || !s.sameOrigin(u) {
		return ""
	}
	if m := s.convRE.FindStringSubmatch(u.Path); m != nil {
		return m[1]
	}
	return ""
}

func (s *Site) sameOrigin(u *url.URL) bool {
	start, err := url.Parse(s.StartURL)
	return err == nil && u.Scheme == start.Scheme && u.Host == start.Host
}

// WithStartURL returns a copy of the site that starts at raw: the loopback
// site's port is only known when it runs.
func (s *Site) WithStartURL(raw string) (*Site, error) {
	c := *s
	c.StartURL = raw
	if err := c.validate(); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrSite, err)
	}
	return &c, nil
}

// Sites reads site profiles: the embedded defaults, overridden or added to
// by the *.toml files in dir (if dir is not empty and exists).
type Sites struct {
	dir string
}

// NewSites returns the site profiles with overrides from dir.
func NewSites(dir string) *Sites { return &Sites{dir: dir} }

// Get returns the profile of the named site, reading it again each time so
// that an edited override applies to the next run without a restart.
func (ss *Sites) Get(name string) (*Site, error) {
	if name == "" || strings.ContainsAny(name, `/\`) || strings.HasPrefix(name, ".") {
		return nil, fmt.Errorf("%w: %q is not a site name", ErrSite, name)
	}
	if ss.dir != "" {
		path := filepath.Join(ss.dir, name+".toml")
		b, err := os.ReadFile(path)
		switch {
		case err == nil:
			s, err := ParseSite(b, path)
			if err != nil {
				return nil, err
			}
			if s.Name != name {
				return nil, fmt.Errorf("%w: %s names site %q, not %q", ErrSite, path, s.Name, name)
			}
			return s, nil
		case !errors.Is(err, fs.ErrNotExist):
			return nil, fmt.Errorf("%w: %v", ErrSite, err)
		}
	}
	b, err := embedded.ReadFile("sites/" + name + ".toml")
	if err != nil {
		names, _ := ss.Names()
		return nil, fmt.Errorf("%w: no site %q (known: %s); add one as %s", ErrSite, name,
			strings.Join(names, ", "), filepath.Join(ss.dirOr("<data>/browser/sites"), name+".toml"))
	}
	return ParseSite(b, "embedded")
}

func (ss *Sites) dirOr(def string) string {
	if ss.dir == "" {
		return def
	}
	return ss.dir
}

// Names lists the known sites, sorted.
func (ss *Sites) Names() ([]string, error) {
	set := map[string]bool{}
	ents, err := embedded.ReadDir("sites")
	if err != nil {
		return nil, err
	}
	for _, e := range ents {
		set[strings.TrimSuffix(e.Name(), ".toml")] = true
	}
	if ss.dir != "" {
		ents, err := os.ReadDir(ss.dir)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
		for _, e := range ents {
			if n, ok := strings.CutSuffix(e.Name(), ".toml"); ok && !e.IsDir() {
				set[n] = true
			}
		}
	}
	out := make([]string, 0, len(set))
	for n := range set {
		out = append(out, n)
	}
	sort.Strings(out)
	return slices.Clip(out), nil
}
