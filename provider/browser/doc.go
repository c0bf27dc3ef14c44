// Package browser is belay's browser provider: it drives a chat web UI
// (ChatGPT, Gemini, Grok, Claude.ai, or any site described by a site
// profile) in an isolated, detached Chromium over the DevTools protocol,
// and binds each run to its browser target and conversation URL, never
// to "the active tab".
//
// Each run gets its own browser on a copy of the site's logged-in seed
// profile; the copy is deleted when the run ends. Before anything is
// typed, the page is classified (ready, login_required,
// challenge_blocking, transient_outage, rate_limited, unknown) and every
// state that is not ready fails with a belay error class and the command
// that fixes it.
//
// Sending the prompt is the run's side effect. Its intent (the prompt's
// hash and the turn baseline) is journaled before a key is typed, and its
// settlement once the prompt shows in the conversation and the URL is a
// stable conversation URL. A resumed run with an intent but no settlement
// looks for the prompt in the conversation before it ever sends again; a
// run with a settlement never sends again, it reattaches and reads. The
// state travels in the run's conversation ref (Kind "browser", ID the
// conversation id, URL the conversation URL, Target the CDP target id,
// Cursor a JSON object).
//
// The browser is started in its own session, so it outlives a daemon
// restart (it runs on Linux and macOS); Resume reattaches to the same target, or reopens the stored
// conversation URL in a new tab or a fresh browser, and journals why.
package browser
