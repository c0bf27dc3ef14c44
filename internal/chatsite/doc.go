// Package chatsite is a loopback fake of a chat web UI (ChatGPT, Gemini,
// Grok, Claude.ai) for testing and benchmarking the browser provider in
// real headless Chromium, offline.
//
// It imitates what users of those sites report goes wrong: answers that
// think for a long time and keep generating server-side after the tab
// closes, the browser dies or the daemon restarts; a delayed switch from
// "/" to "/c/<uuid>" after the first send; a thinking placeholder, a
// preamble, a pause and then streaming; decoy stop buttons outside the
// composer and an action bar that flashes once mid-thinking; error turns
// with Retry; rate limits, login redirects, expired sessions, a logged-out
// shell, challenge pages, blocking modals and 5xx answers; sends that are
// silently dropped or refused with the usage cap (RateLimitNext); file
// artifacts with known sha256 (one slower than 30 s of site time, one
// failing), and artifacts only the page can download (see File).
//
// Every prompt the server receives is logged with its sha256, so tests
// can assert that a prompt was sent exactly once. Time is compressed: a
// Site runs Speed site-seconds per real second, so a 30-minute answer
// takes seconds.
//
// A prompt directs its own answer with a [[key=value ...]] block:
// think, preamble, pause and stream are site durations ("20m", "3s");
// words is the answer's length; error=1 ends in an error turn with Retry;
// artifacts=name,... attaches files ("slow.bin" takes 45 s of site time,
// "broken.bin" fails, "page-*" and "gated-*" need the page: see File);
// stopdelay is the site time the page waits after its stop control is
// clicked before it tells the server.
package chatsite
