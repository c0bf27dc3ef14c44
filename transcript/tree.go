package transcript

import (
	"bytes"
	"fmt"
	"sort"
)

// This file holds what the tree formats (pi v2+, Claude Code) share: the
// conversation path from the leaf to the root, duplicated entries, broken
// parent links and how they are relinked.

// treeSpec tells the tree code about one format.
type treeSpec struct {
	idKey, parentKey string
	// leaf accepts the entries that can be the leaf (nil: any entry).
	leaf func(*entry) bool
	// near accepts an entry as the ancestor an entry with a broken link
	// is relinked to when its real ancestor is unknown (nil: any entry
	// with an id); kids counts the entries naming each id as parent.
	near func(child, cand *entry, kids map[string]int) bool
}

// dropDuplicates drops entries that repeat an earlier entry byte for byte
// (the same line written twice); their id stays in the file through the
// first copy. An entry with the id of an earlier one and other bytes is
// kept, marked repeat: its id names the earlier one.
func (d *Document) dropDuplicates(body []*entry) []*entry {
	if d.region != nil {
		return body // the scan dropped them
	}
	first := make(map[string]*entry, len(body))
	drop := map[*entry]bool{}
	for _, e := range body {
		if e.id == "" {
			continue
		}
		f, ok := first[e.id]
		if !ok {
			first[e.id] = e
			continue
		}
		if bytes.Equal(f.raw, e.raw) {
			drop[e] = true
			d.Dropped = append(d.Dropped, Change{Kind: ChangeDropDuplicate, Line: e.line,
				Reason: fmt.Sprintf("line %d repeats line %d (the same entry written twice)", e.line, f.line)})
			continue
		}
		e.repeat = true
	}
	if len(drop) == 0 {
		return body
	}
	kept := body[:0:0]
	for _, e := range body {
		if !drop[e] {
			kept = append(kept, e)
		}
	}
	entries := d.entries[:0:0]
	for _, e := range d.entries {
		if !drop[e] {
			entries = append(entries, e)
		}
	}
	d.entries = entries
	return kept
}

// salvaged is what could be read from the start of a dropped (torn) line.
type salvaged struct {
	parent   string
	line     int
	fragment bool // the torn start of a line whose glued entries were kept
}

// goneWith is why an entry's parent, salvaged from a dropped line (or a
// torn fragment), is missing.
func goneWith(parent string, line int, fragment bool) string {
	if fragment {
		return fmt.Sprintf("parent %q is gone with the torn fragment dropped from line %d", parent, line)
	}
	return fmt.Sprintf("parent %q is gone with the dropped line %d", parent, line)
}

// tornLine is a dropped line that still names its parent whole but not
// its own id: a Claude Code line keeps its "parentUuid" first and its
// "uuid" near its end, so a tear takes the id and leaves the parent.
type tornLine struct {
	line   int
	parent string // "" for null
}

// tornWhy is why the entry at line at, whose parent is most likely the
// torn line before it (or the torn entry at the start of its own line),
// is relinked to that line's parent, and what it is made when that line
// was a root.
func tornWhy(parent string, line, at int) (why, root string) {
	if line == at {
		return fmt.Sprintf("parent %q is not in the file: most likely it was the entry torn at the start of line %d, this entry written onto it, whose own id was torn away; it takes that entry's parent", parent, line),
			"made a root, as the torn entry was"
	}
	return fmt.Sprintf("parent %q is not in the file: most likely it was the dropped line %d before it, whose own id was torn away; it takes that line's parent", parent, line),
		"made a root, as the torn line was"
}

// salvage reads the id and parent of the dropped lines that still hold
// them complete (a torn line usually keeps its first fields), and lists
// the dropped lines that hold their parent but not their id, in order.
func (d *Document) salvage(spec treeSpec) (map[string]salvaged, []tornLine) {
	out := map[string]salvaged{}
	var torn []tornLine
	for _, dl := range d.droppedRaw {
		var id, parent string
		okID, okParent := false, false
		topFields(dl.raw, func(f field) bool {
			if f.end >= len(dl.raw) {
				return false // the value runs to the tear: not whole
			}
			v := dl.raw[f.start:f.end]
			switch string(f.key) {
			case spec.idKey:
				id, okID = jsonString(v)
			case spec.parentKey:
				if string(v) == "null" {
					parent, okParent = "", true
				} else {
					parent, okParent = jsonString(v)
				}
			}
			return true
		})
		switch {
		case okID && okParent && id != "":
			if _, taken := out[id]; !taken {
				out[id] = salvaged{parent: parent, line: dl.line, fragment: dl.fragment}
			}
		case okParent:
			torn = append(torn, tornLine{line: dl.line, parent: parent})
		}
	}
	// In line order, as tornBefore searches them.
	sort.SliceStable(torn, func(i, j int) bool { return torn[i].line < torn[j].line })
	return out, torn
}

// tornBefore returns the torn line (its id lost) nearest before line n,
// and whether it comes after line after, the nearest entry before n that
// can be the ancestor of the entry at n, whose parent is missing. That
// parent is then most likely the torn line, and the entry takes the torn
// line's parent (when the torn line was an edit that branched the
// conversation, the entry before it in the file is on the abandoned
// branch; the torn line's parent is where the new branch starts).
// torn is in line order: the search is a binary one (one per broken
// link, so a file of many torn lines is not quadratic). A torn line on
// line n itself is the fragment at its start, onto which the entry was
// written (glued.go): it comes before the entry.
func tornBefore(torn []tornLine, after, n int) (tornLine, bool) {
	k := sort.Search(len(torn), func(i int) bool { return torn[i].line > n })
	if k == 0 {
		return tornLine{}, false
	}
	t := torn[k-1]
	return t, t.line > after
}

// linkTree finds every entry whose parent is not in the file, decides the
// ancestor it is relinked to, and returns the conversation path (root
// first) from the leaf, walking the links as repaired.
func (d *Document) linkTree(body []*entry, spec treeSpec) []*entry {
	if r := d.region; r != nil {
		// The scan walked the whole file: take its path and links.
		var path []*entry
		for _, e := range body {
			e.link, e.repeat = e.parent, r.repeat[e.line]
			if p, ok := r.relink[e.line]; ok {
				e.link, e.broken = p, true
			}
			if r.path[e.line] {
				path = append(path, e)
			}
		}
		return path
	}
	byID := make(map[string]*entry, len(body))
	pos := make(map[*entry]int, len(body))
	for i, e := range body {
		pos[e] = i
		if e.id != "" {
			if _, ok := byID[e.id]; !ok {
				byID[e.id] = e
			}
		}
	}
	var lost map[string]salvaged
	var torn []tornLine
	var broken []*entry
	var kids map[string]int
	for i, e := range body {
		e.link = e.parent
		if e.parent == "" || e.parent == e.id || byID[e.parent] != nil {
			continue
		}
		if lost == nil {
			lost, torn = d.salvage(spec)
			kids = map[string]int{}
			for _, c := range body {
				if c.parent != "" && c.parent != c.id && byID[c.parent] != nil {
					kids[c.parent]++
				}
			}
		}
		e.broken = true
		broken = append(broken, e)
		// The nearest surviving ancestor: through the dropped lines that
		// still name their parent, else the nearest entry before it in
		// the file that can be its ancestor.
		p, seen := e.parent, 0
		for seen <= len(lost) {
			s, ok := lost[p]
			if !ok {
				break
			}
			if len(e.via) == 0 {
				e.viaFragment = s.fragment
			}
			e.via = append(e.via, s.line)
			p, seen = s.parent, seen+1
			if p == "" || byID[p] != nil {
				break
			}
		}
		switch {
		case len(e.via) > 0 && (p == "" || byID[p] != nil):
			e.link = p
		default:
			e.via = nil
			e.link = ""
			fits := func(c *entry) bool {
				return c.id != "" && c.id != e.id && (spec.near == nil || spec.near(e, c, kids))
			}
			after := 0 // the line of the nearest entry before that fits
			for j := i - 1; j >= 0; j-- {
				if c := body[j]; fits(c) {
					e.link, after = c.id, c.line
					break
				}
			}
			if t, ok := tornBefore(torn, after, e.line); ok {
				if p := byID[t.parent]; t.parent == "" || p != nil && p.line < t.line && fits(p) {
					e.link, e.viaTorn = t.parent, t.line
				}
			}
		}
	}
	// The path, walking the repaired links.
	var cur *entry
	for i := len(body) - 1; i >= 0; i-- {
		if spec.leaf == nil || spec.leaf(body[i]) {
			cur = body[i]
			break
		}
	}
	var path []*entry
	seen := map[*entry]bool{}
	for cur != nil && !seen[cur] {
		seen[cur] = true
		path = append(path, cur)
		if cur.link == "" || cur.link == cur.id {
			break
		}
		cur = byID[cur.link]
	}
	for i, j := 0, len(path)-1; i < j; i, j = i+1, j-1 {
		path[i], path[j] = path[j], path[i]
	}
	at := make(map[*entry]int, len(path))
	for i, e := range path {
		at[e] = i
	}
	for _, e := range broken {
		var why string
		target := "made a root: no earlier entry can be its ancestor"
		switch {
		case len(e.via) > 0:
			why = goneWith(e.parent, e.via[0], e.viaFragment)
		case e.viaTorn > 0:
			why, target = tornWhy(e.parent, e.viaTorn, e.line)
		default:
			why = fmt.Sprintf("parent %q is not in the file (a lost or torn line)", e.parent)
		}
		if e.link != "" {
			target = fmt.Sprintf("relinked to %q, its nearest surviving ancestor", e.link)
		}
		lostWhat := "a reader walking parents from here stops at it"
		if i, ok := at[e]; ok {
			lostWhat = fmt.Sprintf("a reader walking parents from the leaf stops here and loses the %d entries before it", i)
		}
		d.Relinked = append(d.Relinked, Change{Kind: ChangeRelink, Line: e.line,
			Reason: why + "; " + lostWhat + "; " + target})
	}
	return path
}
