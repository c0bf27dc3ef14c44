package transcript

import (
	"bytes"
	"context"
	"encoding/json"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/belayhq/belay/journal"
)

func text(s string) []Block { return []Block{{Type: BlockText, Text: s}} }

func callMsg(stop string, ids ...string) Message {
	m := Message{Role: RoleAssistant, Meta: Meta{StopReason: stop}}
	for _, id := range ids {
		m.Blocks = append(m.Blocks, Block{Type: BlockToolCall, ID: id, Name: "t", Input: json.RawMessage(`{}`)})
	}
	return m
}

func resultMsg(id string) Message {
	return Message{Role: RoleTool, Blocks: []Block{{Type: BlockToolResult, CallID: id, Content: text("r" + id)}}}
}

// randomConversation draws a messy conversation: calls with and without
// input, results missing, duplicated, out of order, before their calls,
// ids reused across turns, errored turns, blank user turns, split
// responses.
func randomConversation(r *rand.Rand) []Message {
	var msgs []Message
	n := r.IntN(30)
	for i := 0; i < n; i++ {
		switch r.IntN(6) {
		case 0:
			t := "hi"
			if r.IntN(4) == 0 {
				t = "  "
			}
			msgs = append(msgs, Message{Role: RoleUser, Blocks: text(t)})
		case 1, 2:
			stop := ""
			if r.IntN(6) == 0 {
				stop = []string{"error", "aborted"}[r.IntN(2)]
			}
			var ids []string
			for k := r.IntN(4); k > 0; k-- {
				ids = append(ids, "exec_"+strconv.Itoa(r.IntN(3)))
			}
			m := callMsg(stop, ids...)
			if r.IntN(5) == 0 && len(m.Blocks) > 0 {
				m.Blocks[0].Input = nil
			}
			if r.IntN(3) == 0 {
				m.Blocks = append(text("sure"), m.Blocks...)
			}
			if r.IntN(4) == 0 {
				m.Meta.ResponseID = "msg_" + strconv.Itoa(r.IntN(2))
			}
			msgs = append(msgs, m)
		case 3, 4:
			msgs = append(msgs, resultMsg("exec_"+strconv.Itoa(r.IntN(3))))
		default:
			msgs = append(msgs, Message{Role: RoleSystem, Blocks: text("sys")})
		}
	}
	return msgs
}

// TestRepairProperty: after repair every call of a turn that did not error
// has exactly one result, after it; repair is idempotent; no assistant text
// is lost; the input is not modified.
func TestRepairProperty(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 5000; i++ {
		in := randomConversation(r)
		before, _ := json.Marshal(in)
		out, _ := RepairMessages(in)
		after, _ := json.Marshal(in)
		require.Equal(t, string(before), string(after), "input untouched")
		checkPaired(t, out)
		again, rep := RepairMessages(out)
		require.Empty(t, rep.Changes, "idempotent: %s", before)
		require.Equal(t, out, again)
		require.Equal(t, assistantText(in), assistantText(out), "no delivered reply deleted")
	}
}

func assistantText(msgs []Message) string {
	var b bytes.Buffer
	for _, m := range msgs {
		if m.Role == RoleAssistant && m.Text() != "" {
			b.WriteString(m.Text() + "|")
		}
	}
	return b.String()
}

func TestRepairRules(t *testing.T) {
	t.Parallel()
	t.Run("ids reused across turns pair per turn", func(t *testing.T) {
		t.Parallel()
		in := []Message{{Role: RoleUser, Blocks: text("a")}, callMsg("", "exec_0"), resultMsg("exec_0"), callMsg("", "exec_0"), resultMsg("exec_0")}
		out, rep := RepairMessages(in)
		require.Empty(t, rep.Changes)
		require.Equal(t, in, out)
	})
	t.Run("errored turn left alone", func(t *testing.T) {
		t.Parallel()
		m := callMsg("aborted", "c1")
		m.Blocks = append(m.Blocks, Block{Type: BlockToolCall, ID: "c2", Name: "t"})
		in := []Message{{Role: RoleUser, Blocks: text("a")}, m, {Role: RoleUser, Blocks: text("b")}}
		out, rep := RepairMessages(in)
		require.Empty(t, rep.Changes)
		require.Equal(t, in, out)
		// ForProvider leaves the unanswered calls out of the outbound copy.
		sent, rep := ForProvider(in)
		require.Len(t, sent, 2)
		require.Len(t, rep.Changes, 2)
	})
	t.Run("synthetic result is marked", func(t *testing.T) {
		t.Parallel()
		out, rep := RepairMessages([]Message{{Role: RoleUser, Blocks: text("a")}, callMsg("", "c1")})
		require.Len(t, rep.Changes, 1)
		require.Equal(t, ChangeInsertResult, rep.Changes[0].Kind)
		require.True(t, out[2].Synthetic)
		res, _ := out[2].Result()
		require.True(t, res.Synthetic)
		require.True(t, res.IsError)
		require.Equal(t, "c1", res.CallID)
	})
	t.Run("displaced result moved back when one owner", func(t *testing.T) {
		t.Parallel()
		in := []Message{{Role: RoleUser, Blocks: text("a")}, callMsg("", "c1"), {Role: RoleAssistant, Blocks: text("x")}, resultMsg("c1")}
		out, rep := RepairMessages(in)
		require.Len(t, rep.Changes, 1)
		require.Equal(t, ChangeMoveResult, rep.Changes[0].Kind)
		require.Equal(t, RoleTool, out[2].Role)
		require.False(t, out[2].Synthetic)
	})
}

func journalEvents(t *testing.T, path string) []journal.Event {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	var evs []journal.Event
	for _, line := range bytes.Split(bytes.TrimSpace(data), []byte("\n")) {
		var e journal.Event
		require.NoError(t, json.Unmarshal(line, &e))
		evs = append(evs, e)
	}
	return evs
}

func TestFromJournal(t *testing.T) {
	t.Parallel()
	msgs, err := FromJournal(journalEvents(t, "testdata/belay_clean.jsonl"))
	require.NoError(t, err)
	require.Len(t, msgs, 6)
	require.Equal(t, "read it", msgs[0].Text())
	require.Equal(t, "hello there ", msgs[1].Text())
	require.Equal(t, "call_1", msgs[1].ToolCalls()[0].ID)
	require.JSONEq(t, `{}`, string(msgs[1].ToolCalls()[0].Input))
	require.Equal(t, RoleTool, msgs[2].Role)
	require.Equal(t, "friend", msgs[3].Text())
	require.Equal(t, "end_turn", msgs[3].Meta.StopReason)
	require.Equal(t, 3, msgs[3].Meta.Usage.Output)
	require.Equal(t, "again", msgs[4].Text())
	require.Equal(t, "second", msgs[5].Text())

	ts := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	ev := func(typ, data string) journal.Event {
		return journal.Event{TS: ts, Type: typ, Run: "run_1", Data: json.RawMessage(data)}
	}
	// A resent attempt replaces what the failed one streamed; a failed run
	// marks its turn errored.
	msgs, err = FromJournal([]journal.Event{
		ev("run.created", `{"input":{"prompt":"p"}}`),
		ev("run.text", `{"text":"partial"}`),
		ev("run.updated", `{"phase":"awaiting_response","attempt":2,"data":{"attempt":2}}`),
		ev("run.text", `{"text":"whole"}`),
		ev("run.tool_call", `{"id":"c","name":"w","sideEffect":true}`),
		ev("run.updated", `{"phase":"failed"}`),
	})
	require.NoError(t, err)
	require.Len(t, msgs, 2)
	require.Equal(t, "whole", msgs[1].Text())
	require.True(t, msgs[1].Errored())
}

// TestEncodeRoundTrip writes a session's conversation in every format and
// reads it back.
func TestEncodeRoundTrip(t *testing.T) {
	t.Parallel()
	evs := journalEvents(t, "testdata/belay_clean.jsonl")
	want, err := FromJournal(evs)
	require.NoError(t, err)
	for _, f := range Formats {
		var buf bytes.Buffer
		require.NoError(t, Export(&buf, evs, f))
		d, err := Parse(buf.Bytes(), "")
		require.NoError(t, err, "%s:\n%s", f, buf.String())
		require.Equal(t, f, d.Format, buf.String())
		require.Empty(t, d.Dropped)
		got := d.Messages()
		require.Len(t, got, len(want), "%s:\n%s", f, buf.String())
		for i := range want {
			require.Equal(t, want[i].Role, got[i].Role, "%s message %d", f, i)
			require.Equal(t, want[i].Text(), got[i].Text(), "%s message %d", f, i)
			require.Equal(t, len(want[i].ToolCalls()), len(got[i].ToolCalls()))
		}
		require.Empty(t, d.Repair().Changes, f)
		again, err := d.Bytes()
		require.NoError(t, err)
		if f != FormatBelay {
			require.Equal(t, buf.String(), string(again), f)
		}
		// Encoding is deterministic.
		var buf2 bytes.Buffer
		require.NoError(t, Export(&buf2, evs, f))
		if f != FormatBelay {
			require.Equal(t, buf.String(), buf2.String())
		}
	}
}

// TestFromJournalQueuedFollowUp: a follow-up queued while a run streams
// comes after that run's answer (where it started), in the conversation,
// the exports and the history replayed to a provider.
func TestFromJournalQueuedFollowUp(t *testing.T) {
	t.Parallel()
	ts := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var evs []journal.Event
	ev := func(typ, run, data string) {
		ts = ts.Add(time.Second)
		evs = append(evs, journal.Event{Seq: uint64(len(evs) + 1), TS: ts, Type: typ, Run: run, Data: json.RawMessage(data)})
	}
	ev("session.created", "", `{"id":"ses_1","provider":"fake"}`)
	ev("run.created", "run_a", `{"input":{"prompt":"first"}}`)
	ev("run.leased", "run_a", `{}`)
	ev("run.updated", "run_a", `{"phase":"awaiting_response","data":{"attempt":1}}`)
	ev("run.created", "run_b", `{"input":{"prompt":"follow-up"}}`) // queued while run_a streams
	ev("run.updated", "run_b", `{"phase":"queued"}`)
	ev("run.text", "run_a", `{"text":"answer a"}`)
	ev("run.updated", "run_a", `{"phase":"finishing","data":{"stopReason":"end_turn"}}`)
	ev("run.updated", "run_a", `{"phase":"complete"}`)
	ev("run.created", "run_c", `{"input":{"prompt":"never ran"}}`)
	ev("run.leased", "run_b", `{}`)
	ev("run.text", "run_b", `{"text":"answer b"}`)
	ev("run.updated", "run_b", `{"phase":"complete","data":{"stopReason":"end_turn"}}`)
	msgs, err := FromJournal(evs)
	require.NoError(t, err)
	var got []string
	for _, m := range msgs {
		got = append(got, string(m.Role)+": "+m.Text())
	}
	want := []string{"user: first", "assistant: answer a", "user: follow-up", "assistant: answer b", "user: never ran"}
	require.Equal(t, want, got)
	for _, f := range []Format{FormatOpenAI, FormatClaude} {
		var buf, stream bytes.Buffer
		require.NoError(t, Export(&buf, evs, f))
		_, err := ExportStream(context.Background(), &stream, sliceScan(evs), f)
		require.NoError(t, err)
		require.Equal(t, buf.String(), stream.String(), "the streaming export writes the same")
		d, err := Parse(buf.Bytes(), f)
		require.NoError(t, err)
		got = got[:0]
		for _, m := range d.Messages() {
			got = append(got, string(m.Role)+": "+m.Text())
		}
		require.Equal(t, want, got, f)
	}
}
