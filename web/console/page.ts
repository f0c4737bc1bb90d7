import { Hono } from "hono";
import { html } from "hono/html";

/**
 * A first instructor page: the workshops and their hosts, refreshed every two seconds from the API.
 * The token arrives in the URL fragment (never sent to a server or logged) and is kept in sessionStorage.
 */
const script = `
const KEY = "labfleet.token";
if (location.hash.startsWith("#token=")) {
  sessionStorage.setItem(KEY, decodeURIComponent(location.hash.slice(7)));
  history.replaceState(null, "", location.pathname);
}
const token = sessionStorage.getItem(KEY);
const main = document.getElementById("main");
const esc = (s) => String(s ?? "").replace(/[&<>"']/g, (ch) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[ch]);
async function api(path) {
  const r = await fetch("/api" + path, { headers: { authorization: "Bearer " + token } });
  if (!r.ok) throw new Error((await r.json()).error?.message ?? r.statusText);
  return r.json();
}
async function render() {
  if (!token) { main.innerHTML = "<p>Open the instructor URL printed by <code>labfleet dev</code> (it carries the token).</p>"; return; }
  try {
    const { workshops } = await api("/workshops");
    const parts = [];
    for (const w of workshops) {
      const s = await api("/workshops/" + encodeURIComponent(w.name));
      const rows = s.hostList.map((h) => "<tr><td>" + esc(h.id) + "</td><td class='st-" + esc(h.state) + "'>" + esc(h.state) +
        "</td><td>" + esc(h.phase) + "</td><td>" + esc(h.elapsedSeconds ?? "") + "</td><td><pre>" + esc(h.error ?? "") + "</pre></td></tr>").join("");
      const run = s.runs[0];
      parts.push("<section><h2>" + esc(w.name) + " <small>" + esc(w.state) + " · " + w.hosts.ready + "/" + w.hosts.total +
        " ready" + (w.expiry ? " · expires " + esc(w.expiry) : "") + "</small></h2>" +
        (run ? "<p>Last run: " + esc(run.kind) + " " + esc(run.state) + " · " + run.transitions + " transitions</p>" : "") +
        "<table><caption class='sr'>Hosts of " + esc(w.name) + "</caption><thead><tr><th scope='col'>Host</th><th scope='col'>State</th><th scope='col'>Phase</th><th scope='col'>Elapsed (s)</th><th scope='col'>Last error</th></tr></thead><tbody>" +
        rows + "</tbody></table></section>");
    }
    main.innerHTML = parts.join("") || "<p>No workshops yet: <code>labfleet up -f workshop.yaml</code>.</p>";
  } catch (e) { main.innerHTML = "<p role='alert'>" + esc(e.message) + "</p>"; }
}
render();
setInterval(render, 2000);
`;

export const consolePage = new Hono()
  .get("/", (c) => {
    c.header("Cache-Control", "no-store");
    return c.html(html`<!doctype html>
      <html lang="en">
        <head>
          <meta charset="utf-8" />
          <meta name="viewport" content="width=device-width, initial-scale=1" />
          <title>labfleet console</title>
          <style>
            body { font: 15px/1.4 system-ui, sans-serif; margin: 1.5rem; color: #1a1a1a; }
            table { border-collapse: collapse; width: 100%; }
            th, td { text-align: left; padding: 0.3rem 0.6rem; border-bottom: 1px solid #ddd; vertical-align: top; }
            pre { margin: 0; white-space: pre-wrap; font-size: 13px; }
            .st-ready { color: #0a6b2d; font-weight: 600; } .st-failed { color: #a4141b; font-weight: 600; }
            .sr { position: absolute; left: -9999px; }
          </style>
        </head>
        <body>
          <h1>labfleet</h1>
          <main id="main" aria-live="polite"><p>Loading…</p></main>
          <script src="/console/app.js"></script>
        </body>
      </html>`);
  })
  .get("/app.js", (c) => {
    c.header("Content-Type", "text/javascript; charset=utf-8");
    return c.body(script);
  });
