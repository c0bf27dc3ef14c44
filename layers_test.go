package belay_test

import (
	"bufio"
	"bytes"
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/belayhq/belay"

// layer is a group of packages at one height. A package may import the
// packages of its own layer and of lower layers, never of a higher one nor
// of another layer at the same height (docs/architecture.md, "Layers").
type layer struct {
	name   string
	height int
	// paths are package paths relative to the module; a path ending in
	// "/..." covers the packages under it too.
	paths []string
}

// layers, lowest first. Every package of the module must be in one: a new
// package is placed here on purpose, not by accident.
var layers = []layer{
	{"vocabulary", 0, []string{"", "apitype"}},
	{"utilities", 1, []string{"internal/atomicfile", "internal/chatsite", "internal/clock", "internal/cmdline", "internal/crashtest", "internal/datadir", "internal/delta",
		"internal/gotune", "internal/ids", "internal/jsonx", "internal/proc", "internal/testpg", "internal/vfs/..."}},
	{"formats", 2, []string{"journal", "journal/commitlog", "lock", "transcript"}},
	{"store", 3, []string{"store/..."}},
	// The store conformance suite drives runtime instances over a store
	// (the peer suite): it sits above the runtime, and only stores' tests
	// import it.
	{"conformance", 6, []string{"store/storetest"}},
	{"providers", 3, []string{"provider/..."}},
	{"doctor", 4, []string{"doctor"}},
	{"runtime", 5, []string{"runtime"}},
	{"server", 6, []string{"api"}},
	{"client", 6, []string{"client"}},
	{"app", 7, []string{"cmd/...", "internal/app/..."}},
}

// layerOf returns the layer of a package of the module, by its longest
// matching path.
func layerOf(pkg string) (layer, bool) {
	rel := strings.TrimPrefix(strings.TrimPrefix(pkg, module), "/")
	var best layer
	bestLen := -1
	for _, l := range layers {
		for _, p := range l.paths {
			base, tree := strings.CutSuffix(p, "/...")
			if rel == base || tree && strings.HasPrefix(rel, base+"/") {
				if len(base) > bestLen {
					best, bestLen = l, len(base)
				}
			}
		}
	}
	return best, bestLen >= 0
}

// goList runs go list over the module's packages and returns, for each,
// the packages of the module that the template's list names.
func goList(t *testing.T, args ...string) map[string][]string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to check the layers: %v", err)
	}
	cmd := exec.Command(goBin, append([]string{"list"}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list %v: %v\n%s", args, err, stderr.Bytes())
	}
	res := map[string][]string{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		res[f[0]] = nil
		for _, dep := range f[1:] {
			if dep == module || strings.HasPrefix(dep, module+"/") {
				res[f[0]] = append(res[f[0]], dep)
			}
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(res) == 0 {
		t.Fatalf("go list %v listed no package", args)
	}
	return res
}

// TestLayers: imports flow one way. A package imports only its own layer
// and lower layers, so that the client never pulls in the server, the
// runtime or a store, and no library reaches up into the application.
func TestLayers(t *testing.T) {
	t.Parallel()
	imports := goList(t, "-f", `{{.ImportPath}} {{join .Imports " "}}`, module+"/...")
	for pkg, deps := range imports {
		from, ok := layerOf(pkg)
		if !ok {
			t.Errorf("package %s is in no layer: add it to the layers of layers_test.go and docs/architecture.md", pkg)
			continue
		}
		for _, dep := range deps {
			to, ok := layerOf(dep)
			if !ok || to.name == from.name || to.height < from.height {
				continue // an unplaced dep is reported as a package of its own
			}
			t.Errorf("%s (layer %s) imports %s (layer %s): imports must flow down to lower layers only", pkg, from.name, dep, to.name)
		}
	}
}

// TestVocabularyAlone: the client depends on the vocabulary alone, and
// the vocabulary on the standard library alone, so that a program that
// speaks the API links neither the server, the runtime nor a store.
func TestVocabularyAlone(t *testing.T) {
	t.Parallel()
	vocab := map[string]bool{module: true, module + "/apitype": true}
	for _, pkg := range []string{module, module + "/apitype", module + "/client"} {
		// -deps lists every package pkg depends on; those outside the
		// standard library print with a mark.
		out := goList(t, "-deps", "-f", `{{if not .Standard}}{{.ImportPath}}{{end}}`, pkg)
		for dep := range out {
			if dep == pkg {
				continue
			}
			if !vocab[dep] {
				t.Errorf("%s depends on %s: it may depend only on the standard library and the vocabulary (package belay, apitype)", pkg, dep)
			}
		}
	}
}
