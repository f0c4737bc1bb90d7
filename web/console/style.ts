/**
 * The console's one stylesheet, served from /console/console.css. Colours keep at least 4.5:1 against
 * their background; focus is a 3 px outline on every control; wide tables scroll inside their own box, so the
 * page fits 1280x800, a 768 px tablet and a 390 px phone without scrolling sideways.
 *
 * `scroll`: put every wide table (and anything else wider than a phone) in a `<div class="scroll">`: the box
 * scrolls sideways on its own, the page does not. `table-wrap` adds the white box with its border.
 */
export const consoleCss = `
*, *::before, *::after { box-sizing: border-box; }
html { -webkit-text-size-adjust: 100%; }
body { margin: 0; font: 16px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: #111; background: #f6f7f9; }
a { color: #0645ad; }
a:focus-visible, button:focus-visible, input:focus-visible, select:focus-visible, textarea:focus-visible,
summary:focus-visible, [tabindex]:focus-visible { outline: 3px solid #b45309; outline-offset: 2px; }
.skip { position: absolute; left: -9999px; top: 0; background: #fff; padding: 0.5rem 1rem; z-index: 10; }
.skip:focus { left: 0.5rem; top: 0.5rem; }
.sr-only { position: absolute; width: 1px; height: 1px; overflow: hidden; clip: rect(0 0 0 0); white-space: nowrap; }
header.top { display: flex; flex-wrap: wrap; align-items: center; gap: 0.5rem 1.5rem; padding: 0.6rem 1.25rem; background: #1f2937; color: #fff; }
header.top a { color: #fff; }
header.top .brand { font-weight: 700; font-size: 1.15rem; text-decoration: none; }
header.top nav { display: flex; gap: 1rem; flex-wrap: wrap; }
header.top nav a[aria-current="page"] { text-decoration-thickness: 3px; }
header.top .who { margin-left: auto; display: flex; align-items: center; gap: 0.75rem; flex-wrap: wrap; }
header.top .who form { margin: 0; }
header.top button { background: #fff; color: #1f2937; border: 0; }
header.top a:focus-visible, header.top button:focus-visible { outline-color: #fbbf24; }
main { max-width: 82rem; margin: 0 auto; padding: 1rem 1.25rem 3rem; }
h1 { font-size: 1.6rem; margin: 0.75rem 0 0.75rem; line-height: 1.25; overflow-wrap: anywhere; }
h2 { font-size: 1.2rem; margin: 1.5rem 0 0.5rem; }
h3 { font-size: 1.05rem; margin: 0 0 0.5rem; }
nav.tabs { display: flex; gap: 0.25rem; flex-wrap: wrap; border-bottom: 2px solid #c7ccd4; margin-top: 0.5rem; }
nav.tabs a { padding: 0.45rem 0.9rem; text-decoration: none; border-radius: 6px 6px 0 0; color: #1f2937; }
nav.tabs a[aria-current="page"] { background: #fff; border: 2px solid #c7ccd4; border-bottom-color: #fff; margin-bottom: -2px; font-weight: 600; }
button, .button { display: inline-block; min-height: 2.5rem; padding: 0.45rem 0.95rem; font: inherit; font-weight: 600; text-align: center; text-decoration: none; color: #fff; background: #0b57d0; border: 2px solid #0b57d0; border-radius: 6px; cursor: pointer; }
button.secondary, .button.secondary { background: #fff; color: #0b57d0; }
button.danger, .button.danger { background: #a4141b; border-color: #a4141b; color: #fff; }
button.danger.secondary, .button.danger.secondary { background: #fff; color: #a4141b; }
label { display: block; font-weight: 600; margin: 0.6rem 0 0.2rem; }
label.check { display: flex; gap: 0.5rem; align-items: center; font-weight: 400; }
label.check input { width: 1.15rem; height: 1.15rem; }
input[type="text"], input[type="password"], input[type="number"], input[type="email"], input[type="file"], select, textarea {
  font: inherit; padding: 0.45rem 0.6rem; border: 2px solid #555; border-radius: 6px; background: #fff; color: #111; max-width: 100%; }
input[type="text"], input[type="password"], input[type="email"] { width: 100%; }
input[type="number"] { width: 7rem; }
textarea { width: 100%; font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; font-size: 0.9rem; line-height: 1.4; }
[aria-invalid="true"], input[aria-invalid="true"], select[aria-invalid="true"], textarea[aria-invalid="true"] { border-color: #a4141b; }
.hint { font-size: 0.9rem; color: #3d4450; margin: 0.2rem 0 0; }
.field-error { font-size: 0.9rem; color: #a4141b; font-weight: 600; margin: 0.2rem 0 0; }
.notice { background: #e8f1fd; border-left: 5px solid #0645ad; padding: 0.6rem 0.9rem; border-radius: 4px; }
.alert { margin: 0.75rem 0; background: #fdecee; border-left: 5px solid #a4141b; padding: 0.6rem 0.9rem; border-radius: 4px; color: #5c0a10; }
.alert h2 { margin-top: 0; font-size: 1.05rem; }
.alert ul { margin: 0.25rem 0 0; padding-left: 1.25rem; }
.live-status:empty { display: none; }
.live-status { background: #fff7e6; border-left: 5px solid #b45309; padding: 0.5rem 0.9rem; }
.summary { display: flex; flex-wrap: wrap; gap: 0.4rem 1.25rem; margin: 0.25rem 0 0.5rem; padding: 0; list-style: none; }
.summary li { white-space: nowrap; }
.summary dd { margin: 0; }
.panel { margin: 0.75rem 0; background: #fff; border: 1px solid #d5d9e0; border-radius: 8px; padding: 0.9rem 1rem; }
.actions { display: grid; grid-template-columns: repeat(auto-fill, minmax(15rem, 1fr)); gap: 0.75rem; }
.actions form, .actions .card { margin: 0; background: #fff; border: 1px solid #d5d9e0; border-radius: 8px; padding: 0.75rem 0.9rem; display: flex; flex-direction: column; gap: 0.35rem; }
.actions button, .actions .button { align-self: flex-start; margin-top: auto; }
.actions h3 { margin: 0; }
.row { display: flex; flex-wrap: wrap; gap: 0.5rem; align-items: center; }
.row form { margin: 0; }
.scroll { overflow-x: auto; max-width: 100%; -webkit-overflow-scrolling: touch; }
.table-wrap { overflow-x: auto; background: #fff; border: 1px solid #d5d9e0; border-radius: 8px; }
.receipt code { white-space: nowrap; }
table { border-collapse: collapse; width: 100%; }
caption { text-align: left; font-weight: 600; padding: 0.6rem 0.75rem 0.2rem; }
th, td { text-align: left; padding: 0.45rem 0.75rem; border-bottom: 1px solid #e1e4e9; vertical-align: top; }
thead th { background: #eef0f3; font-size: 0.9rem; }
tbody th { font-weight: 600; white-space: nowrap; }
td.num { white-space: nowrap; }
td form { display: inline-flex; gap: 0.35rem; align-items: center; margin: 0 0.35rem 0.25rem 0; flex-wrap: wrap; }
td form button { min-height: 2.1rem; padding: 0.25rem 0.6rem; font-size: 0.9rem; }
td form select { padding: 0.25rem 0.4rem; }
pre.error { margin: 0; white-space: pre-wrap; overflow-wrap: anywhere; font-size: 0.85rem; max-height: 9rem; overflow-y: auto; color: #5c0a10; }
code { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; background: #eef0f3; padding: 0.05rem 0.3rem; border-radius: 4px; overflow-wrap: anywhere; }
.code-big { font-size: 1.35rem; letter-spacing: 0.04em; }
.state { font-weight: 600; white-space: nowrap; }
.st-ready, .st-succeeded, .st-open, .st-free { color: #0a6b2d; }
.st-failed, .st-aborted { color: #a4141b; }
.st-deploying, .st-provisioning, .st-running, .st-tearing_down, .st-building, .st-published { color: #7a4a00; }
.st-pending, .st-draft, .st-torn_down, .st-closed, .st-claimed { color: #3d4450; }
progress { width: 8rem; height: 0.9rem; vertical-align: middle; accent-color: #0b57d0; }
.phase { margin-left: 0.4rem; }
ul.board { list-style: none; padding: 0; margin: 0; display: grid; grid-template-columns: repeat(auto-fill, minmax(9rem, 1fr)); gap: 0.5rem; }
ul.board li { padding: 0.5rem 0.7rem; border-radius: 6px; border: 2px solid #c7ccd4; background: #fff; overflow-wrap: anywhere; min-width: 0; }
ul.board li.free { border-color: #0a6b2d; }
ul.board .lab { display: block; font-weight: 600; }
ul.board .state { white-space: normal; overflow-wrap: anywhere; }
td.student { min-width: 9rem; overflow-wrap: anywhere; }
svg.timeline { display: block; }
.fleet-counts strong { font-variant-numeric: tabular-nums; }
section.run { margin-top: 1rem; }
section.run h2 { margin: 0 0 0.25rem; }
.yaml-line { display: block; margin-top: 0.2rem; white-space: pre-wrap; }
.ev-host-ready, .ev-lab-released { color: #0a6b2d; }
.ev-host-failed { color: #a4141b; }
.ev-run-started, .ev-run-finished, .ev-lab-claimed, .ev-workshop-torn-down { color: #3d4450; }
.activity { max-height: 28rem; overflow-y: auto; }
.activity td.what { overflow-wrap: anywhere; }
input.secret { width: 100%; font: 0.95rem/1.4 ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; padding: 0.45rem 0.6rem; border: 2px solid #555; border-radius: 6px; background: #fff; color: #111; }
pre.command { margin: 0.25rem 0; white-space: pre-wrap; overflow-wrap: anywhere; }
.providers { list-style: none; padding: 0; display: flex; gap: 0.5rem; flex-wrap: wrap; }
.login { max-width: 30rem; }
@media (max-width: 820px) {
  main { padding: 0.75rem; }
  th, td { padding: 0.4rem 0.5rem; }
  progress { width: 5rem; }
}
.slide { background: #fff; border: 1px solid #c7ccd4; border-radius: 8px; padding: 1.5rem; margin-top: 1rem; }
.slide-grid { display: flex; flex-wrap: wrap; gap: 2rem; align-items: center; }
.slide-qr { margin: 0; width: min(24rem, 100%); flex: 0 0 auto; }
.slide-text { flex: 1 1 22rem; min-width: 0; }
.slide-qr svg { display: block; width: 100%; height: auto; }
.slide-label { margin: 0; font-size: 1.3rem; color: #3d4450; }
.slide-url { margin: 0 0 1.2rem; font-size: clamp(1.6rem, 4.5vw, 3.4rem); font-weight: 700; overflow-wrap: anywhere; }
.slide-code { margin: 0; font: 700 clamp(2rem, 6vw, 4.8rem)/1.1 ui-monospace, SFMono-Regular, Menlo, monospace; letter-spacing: 0.05em; overflow-wrap: anywhere; }
.slide-note { font-size: 1.2rem; }
.exec-output { min-width: 14rem; }
.exec-output pre.command { max-height: 20rem; overflow-y: auto; }
td.nowrap { white-space: nowrap; }
.actions .row { margin: auto 0 0; }
.actions .row button { margin-top: 0; }
section.rollout { margin-top: 1rem; }
section.rollout .row { margin-top: 0.5rem; }
.failure { margin-top: 0.75rem; }
.failure h3 { margin: 0 0 0.25rem; }
pre.log-tail { max-height: 16rem; overflow-y: auto; background: #fff; border: 1px solid #d5d9e0; border-radius: 6px; padding: 0.5rem; }
`;
