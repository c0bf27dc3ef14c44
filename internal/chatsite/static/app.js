// Loopback Chat: the page of the fake chat site. It renders the
// conversation the server computes, polling it, and keeps the turn
// elements in place so that selectors stay valid while they update.
(function () {
  "use strict";
  const v2 = window.UI.v2;
  const $ = (s) => document.querySelector(s);
  const thread = v2 ? $("#thread-v2") : $("#thread");
  const form = v2 ? $("#composer-v2-form") : $("#composer");
  const composer = v2 ? $("#composer-v2") : $("#prompt");
  const stopBtn = v2 ? $('[data-testid="stop-v2"]') : $("#stop");
  const decoy = $(".voice-stop");
  const SWITCH_DELAY = window.UI.switchDelay;
  const upload = $("#upload");
  let files = []; // names of the uploaded files the next send attaches
  let conv = location.pathname.startsWith("/c/") ? location.pathname.slice(3) : "";
  let timer = null;
  let stopDelay = 0; // ms the page waits after a stop click before it posts the stop

  function showError(msg) { $("#error").textContent = msg; }

  function composerText() { return v2 ? composer.innerText : composer.value; }
  function clearComposer() { if (v2) composer.textContent = ""; else composer.value = ""; }

  async function send(ev) {
    ev.preventDefault();
    const text = composerText();
    if (!text.trim()) return;
    clearComposer();
    let r;
    try {
      const picker = $("#model");
      const menuPicker = $("#model-v2");
      const model = picker ? picker.value : menuPicker ? menuPicker.dataset.model : "";
      r = await fetch("/api/send", { method: "POST", body: JSON.stringify({ conv, text, model, files }) });
    } catch (e) { showError("A network error occurred."); return; }
    const j = await r.json().catch(() => ({}));
    if (!r.ok) { showError(j.error || "Something went wrong."); return; }
    if (!j.conv) return; // the send was dropped: nothing happens
    files = [];
    if ($("#chips")) $("#chips").textContent = "";
    if (!conv) {
      conv = j.conv;
      // The URL switches to the conversation a moment later.
      setTimeout(() => history.pushState({}, "", "/c/" + conv), SWITCH_DELAY);
    }
    poll();
  }

  async function post(path) {
    await fetch(path, { method: "POST", body: JSON.stringify({ conv }) });
    poll();
  }

  function el(tag, cls, text) {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined) e.textContent = text;
    return e;
  }

  function renderTurn(node, t) {
    if (node.dataset.key === JSON.stringify(t)) return;
    node.dataset.key = JSON.stringify(t);
    node.dataset.state = t.state || "";
    node.textContent = "";
    const body = el("div", v2 ? "content" : "markdown");
    node.appendChild(body);
    if (t.role === "user") { body.textContent = t.text; return; }
    if (t.state === "thinking") {
      body.appendChild(el("span", "thinking", "Thinking…"));
      node.appendChild(el("button", "answer-now", "Answer now"));
    } else {
      body.textContent = t.text;
    }
    if (t.state === "error") {
      node.appendChild(el("div", "error-text", "Something went wrong while generating the response."));
      const b = el("button", "retry", "Retry");
      b.onclick = () => post("/api/retry");
      node.appendChild(b);
    }
    if (t.actionBar) {
      const bar = el("div", "actions");
      const copy = el("button", "copy", "Copy");
      copy.setAttribute("aria-label", "Copy");
      // The copy button copies the turn's markdown source, not its text:
      // the current UI through the Clipboard API, the second one through
      // a selected textarea and execCommand("copy").
      copy.onclick = v2 ? () => {
        const ta = document.createElement("textarea");
        ta.value = t.markdown;
        document.body.appendChild(ta);
        ta.focus();
        ta.select();
        document.execCommand("copy");
        ta.remove();
      } : () => navigator.clipboard.writeText(t.markdown);
      bar.appendChild(copy);
      const aloud = el("button", "read-aloud", "Read aloud");
      aloud.setAttribute("aria-label", "Stop read aloud");
      bar.appendChild(aloud);
      node.appendChild(bar);
    }
    if (t.artifacts) {
      const box = el("div", "artifacts");
      for (const a of t.artifacts) {
        const link = el("a", "artifact", a.name);
        // A ".blob.txt" artifact is made in the page, as a blob: URL.
        link.href = a.name.endsWith(".blob.txt") ? URL.createObjectURL(new Blob(["blob artifact " + a.name])) : a.href;
        if (a.href.startsWith("sandbox:")) {
          // The page makes the download: it asks for a one-time URL and
          // follows it, as ChatGPT does for its sandbox links.
          link.addEventListener("click", async (ev) => {
            ev.preventDefault();
            const r = await fetch("/files/" + conv + "/" + encodeURIComponent(a.name) + "/ticket", { method: "POST", headers: { "X-Chat-Page": "1" } });
            if (!r.ok) return;
            const go = document.createElement("a");
            go.href = (await r.json()).url;
            go.setAttribute("download", a.name);
            document.body.appendChild(go);
            go.click();
            go.remove();
          });
        } else {
          link.setAttribute("download", a.name);
        }
        box.appendChild(link);
      }
      node.appendChild(box);
    }
  }

  function render(c) {
    const turns = c.turns || [];
    let busy = false;
    turns.forEach((t, i) => {
      let node = thread.children[i];
      if (!node) {
        node = document.createElement(v2 ? "article" : "div");
        if (v2) node.dataset.author = t.role; else { node.className = "turn"; node.dataset.role = t.role; }
        thread.appendChild(node);
      }
      renderTurn(node, t);
      if (t.state === "thinking" || t.state === "streaming") { busy = true; stopDelay = t.stopDelayMs || 0; }
    });
    stopBtn.hidden = !busy;
    decoy.hidden = !busy;
    return busy;
  }

  async function poll() {
    clearTimeout(timer);
    if (!conv) return;
    let busy = true;
    try {
      const r = await fetch("/api/conv/" + conv);
      const j = await r.json().catch(() => ({}));
      if (r.status === 401) { showError(j.error || "Your session has expired."); return; }
      if (r.ok) busy = render(j);
    } catch (e) { showError("A network error occurred."); }
    timer = setTimeout(poll, busy ? 100 : 1000);
  }

  // Uploads show a chip with progress, then done or failed.
  if (upload) upload.addEventListener("change", async () => {
    for (const f of Array.from(upload.files)) {
      const chip = el("div", "file-chip", f.name + " · uploading…");
      chip.dataset.state = "uploading";
      $("#chips").appendChild(chip);
      const r = await fetch("/api/upload?name=" + encodeURIComponent(f.name), { method: "POST", body: f }).catch(() => null);
      if (r && r.ok) {
        chip.textContent = f.name;
        chip.dataset.state = "done";
        files.push(f.name);
      } else {
        chip.textContent = f.name + " · upload failed";
        chip.dataset.state = "error";
      }
    }
  });
  // The second UI's model picker is a button that opens a menu.
  const menuPicker = $("#model-v2");
  if (menuPicker) {
    const menu = $("#model-menu");
    menuPicker.onclick = () => { menu.hidden = !menu.hidden; };
    for (const item of menu.querySelectorAll("[role=menuitem]")) {
      item.onclick = () => {
        menuPicker.dataset.model = item.dataset.model;
        menuPicker.textContent = "Model: " + item.dataset.model;
        menu.hidden = true;
      };
    }
  }
  form.addEventListener("submit", send);
  stopBtn.addEventListener("click", async () => {
    if (stopDelay) await new Promise((r) => setTimeout(r, stopDelay));
    post("/api/stop");
  });
  const dismiss = $("#dismiss");
  if (dismiss) dismiss.onclick = async () => {
    await fetch("/api/dismiss", { method: "POST" });
    $("#modal").remove();
  };
  window.addEventListener("popstate", () => location.reload());
  poll();
})();
