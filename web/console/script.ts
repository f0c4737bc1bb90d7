import { timesJs } from "../time.tsx";

/**
 * The console's only JavaScript, served from /console/console.js (the CSP allows scripts from 'self' only:
 * nothing inline). Every page works without it; it adds four things:
 * - live updates: a page whose <main> names a JSON endpoint in data-live is polled every 2 s; the endpoint
 *   answers `{regions: {id: html}}`, server-rendered fragments that replace the element of that id. A region
 *   is left alone while it holds the focus or a form control someone has changed (a list whose choice is
 *   still the one it came with, marked or first, is unchanged), so typing, choosing and keyboard navigation
 *   are never undone by an update. A page with an activity list (an element with
 *   data-after, the newest event id it shows) asks for `?after=<that id>`; the answer's `activity.html` rows
 *   go at the top of the list and `activity.last` is where the next poll continues;
 * - sign-in from the link `labfleet dev` prints: its token travels in the URL fragment (never sent to a
 *   server, never logged), is moved into the token field, dropped from the address bar, and submitted;
 * - times (`<time data-time>`, web/time.tsx) in the viewer's time zone, in the CLI's format, kept current as
 *   time passes and after each live update;
 * - a chosen workshop.yaml file is shown in the text area, where it can still be edited; errors found in it
 *   take the focus when the page comes back.
 */
export const consoleJs = `${timesJs}
(() => {
  "use strict";
  const token = document.getElementById("token");
  if (token && location.hash.startsWith("#token=")) {
    const value = decodeURIComponent(location.hash.slice(7));
    history.replaceState(null, "", location.pathname + location.search);
    token.value = value;
    if (token.form && !document.querySelector("[data-login-error]")) token.form.requestSubmit();
  }

  const file = document.getElementById("file");
  const yaml = document.getElementById("yaml");
  if (file && yaml) {
    file.addEventListener("change", async () => {
      const chosen = file.files && file.files[0];
      if (!chosen) return;
      yaml.value = await chosen.text();
      file.value = "";
      yaml.focus();
    });
  }

  // A form sent back with errors: the summary of them gets the focus, so it is read out first.
  const errors = document.getElementById("yaml-errors");
  if (errors) errors.focus();

  const main = document.querySelector("main[data-live]");
  if (!main) return;
  const url = main.getAttribute("data-live");
  const status = document.getElementById("live-status");
  const say = (html) => { if (status) status.innerHTML = html; };
  // The option a select shows untouched: the one marked selected, else (a single-choice list) the first.
  const shown = (select) => {
    for (const o of select.options) if (o.defaultSelected) return o.index;
    return select.multiple || select.size > 1 ? -1 : 0;
  };
  const changed = (el) => {
    for (const c of el.querySelectorAll("input, select, textarea")) {
      if (c.type === "checkbox" || c.type === "radio") { if (c.checked !== c.defaultChecked) return true; }
      else if (c.tagName === "SELECT") { if (c.selectedIndex !== shown(c)) return true; }
      else if (c.value !== c.defaultValue) return true;
    }
    return false;
  };
  const busy = (el) => (document.activeElement !== document.body && el.contains(document.activeElement)) || changed(el);
  const feed = document.querySelector("[data-after]");
  let after = feed ? feed.getAttribute("data-after") : "";
  const target = () => (after ? url + (url.includes("?") ? "&" : "?") + "after=" + encodeURIComponent(after) : url);
  const addActivity = (a) => {
    if (!feed || !a) return;
    if (a.html) {
      for (const e of feed.querySelectorAll("[data-empty]")) e.remove();
      feed.insertAdjacentHTML("afterbegin", a.html);
      labfleetTimes.refresh(feed);
      while (feed.children.length > 200) feed.lastElementChild.remove();
    }
    if (a.last) {
      after = a.last;
      feed.setAttribute("data-after", after);
    }
  };
  const last = new Map();
  let polls = 0;
  let stopped = false;
  const tick = async () => {
    if (document.hidden) return;
    try {
      const r = await fetch(target(), { headers: { accept: "application/json" }, credentials: "same-origin", cache: "no-store" });
      if (r.status === 401 || r.status === 403) {
        stopped = true;
        say('Your session has ended, so this page no longer updates. <a href="/console/login">Sign in again</a>.');
        return;
      }
      if (!r.ok) throw new Error("HTTP " + r.status);
      const data = await r.json();
      for (const [id, html] of Object.entries(data.regions || {})) {
        const el = document.getElementById(id);
        if (!el || last.get(id) === html || busy(el)) continue;
        el.innerHTML = html;
        last.set(id, html);
        labfleetTimes.refresh(el);
      }
      addActivity(data.activity);
      polls += 1;
      main.setAttribute("data-polls", String(polls));
      say("");
    } catch (err) {
      say("Live updates paused: the console could not be reached. Retrying every 2 seconds.");
    }
  };
  const loop = async () => {
    await tick();
    if (!stopped) setTimeout(loop, 2000);
  };
  setTimeout(loop, 2000);
})();
`;
