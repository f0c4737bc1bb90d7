/** The portal's one stylesheet (served from /portal.css, so the CSP needs no inline styles). */
export const portalCss = `
*, *::before, *::after { box-sizing: border-box; }
html { -webkit-text-size-adjust: 100%; }
body { margin: 0; font: 18px/1.5 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: #111; background: #fafafa; }
main { max-width: 40rem; margin: 0 auto; padding: 1rem 1rem 2rem; }
h1 { font-size: 1.6rem; margin: 0.5rem 0 1rem; line-height: 1.25; }
h2 { font-size: 1.25rem; margin: 1.75rem 0 0.5rem; }
a { color: #0645ad; }
a:focus-visible, button:focus-visible, input:focus-visible { outline: 3px solid #f5a623; outline-offset: 2px; }
label { display: block; font-weight: 600; margin: 1rem 0 0.25rem; }
input { width: 100%; font-size: 1.15rem; padding: 0.7rem 0.75rem; min-height: 3rem; border: 2px solid #555; border-radius: 6px; background: #fff; color: #111; }
input[aria-invalid="true"] { border-color: #b00020; }
.hint { font-size: 0.95rem; color: #444; margin: 0.25rem 0 0; }
.field-error, .alert { color: #8a0016; font-weight: 600; }
.field-error { margin: 0.35rem 0 0; }
.alert { background: #fdecee; border-left: 5px solid #b00020; padding: 0.75rem 1rem; border-radius: 4px; }
.warning { background: #fff4d6; border-left: 5px solid #8a5a00; padding: 0.75rem 1rem; border-radius: 4px; font-weight: 600; color: #4d3200; }
.notice { background: #e8f1fd; border-left: 5px solid #0645ad; padding: 0.75rem 1rem; border-radius: 4px; }
button, .button { display: inline-block; width: 100%; margin-top: 1.25rem; min-height: 3rem; padding: 0.75rem 1rem; font-size: 1.15rem; font-weight: 600; text-align: center; text-decoration: none; color: #fff; background: #0b57d0; border: 0; border-radius: 6px; cursor: pointer; }
button.secondary { background: #fff; color: #0b57d0; border: 2px solid #0b57d0; }
.inline-form button { width: auto; margin-top: 0.5rem; min-height: 2.75rem; }
ul.board { list-style: none; padding: 0; margin: 0; display: grid; grid-template-columns: repeat(auto-fill, minmax(9.5rem, 1fr)); gap: 0.5rem; }
ul.board li { padding: 0.6rem 0.75rem; border-radius: 6px; border: 2px solid #ccc; background: #fff; }
ul.board .lab { display: block; font-weight: 600; }
ul.board .free { border-color: #0a6b2d; }
ul.board .free .status { color: #0a6b2d; }
ul.board .claimed .status, ul.board .unavailable .status { color: #444; }
ul.board .building .status { color: #6b4e00; }
ul.board .failed .status { color: #8a0016; }
dl { display: grid; grid-template-columns: minmax(6rem, max-content) 1fr; gap: 0.4rem 1rem; margin: 0; }
dt { font-weight: 600; }
dd { margin: 0; overflow-wrap: anywhere; }
code { font-size: 1.05rem; background: #eee; padding: 0.1rem 0.3rem; border-radius: 4px; overflow-wrap: anywhere; }
/* A wide table (or anything wider than a phone) goes in a <div class="scroll">: it scrolls in its own box. */
.scroll { overflow-x: auto; max-width: 100%; -webkit-overflow-scrolling: touch; }
table { border-collapse: collapse; width: 100%; }
th, td { text-align: left; padding: 0.4rem 0.5rem; border-bottom: 1px solid #ccc; vertical-align: top; }
main.lab { max-width: 40rem; }
.lab-grid { display: grid; gap: 1.5rem; }
.guide-frame { display: block; width: 100%; height: 70vh; border: 2px solid #ccc; border-radius: 6px; background: #fff; }
@media (min-width: 64rem) {
  main.lab:has(.lab-grid) { max-width: 96rem; }
  .lab-grid { grid-template-columns: minmax(22rem, 2fr) 3fr; align-items: start; }
  .guide { position: sticky; top: 1rem; }
  .guide h2 { margin-top: 0.5rem; }
  .guide-frame { height: calc(100vh - 7rem); }
}
button.copy { width: auto; min-height: 2.25rem; margin: 0 0 0 0.5rem; padding: 0.25rem 0.75rem; font-size: 0.95rem; background: #fff; color: #0b57d0; border: 2px solid #0b57d0; vertical-align: middle; }
.sr-only { position: absolute; width: 1px; height: 1px; overflow: hidden; clip: rect(0 0 0 0); white-space: nowrap; }
ul.checks { list-style: none; padding: 0; margin: 0.5rem 0 0; }
ul.checks li { padding: 0.6rem 0.75rem; margin: 0 0 0.5rem; border-radius: 6px; border: 2px solid #ccc; background: #fff; }
ul.checks .check-name { font-weight: 600; }
ul.checks .check-state { display: inline-block; width: 1.5rem; font-weight: 700; }
ul.checks .passed { border-color: #0a6b2d; }
ul.checks .passed .check-state, ul.checks .passed .check-status { color: #0a6b2d; }
ul.checks .failed { border-color: #b00020; }
ul.checks .failed .check-state, ul.checks .failed .check-status { color: #8a0016; }
.check-hint { margin: 0.35rem 0 0; }
.check-when { margin: 0.25rem 0 0; font-size: 0.95rem; color: #444; }
pre { white-space: pre-wrap; overflow-wrap: anywhere; font-size: 0.9rem; background: #eee; padding: 0.5rem; border-radius: 4px; max-height: 12rem; overflow: auto; }
footer { max-width: 40rem; margin: 0 auto; padding: 1rem; border-top: 1px solid #ddd; font-size: 0.95rem; }
@media (prefers-color-scheme: dark) {
  body { background: #121212; color: #eee; }
  a { color: #8ab4f8; }
  input, ul.board li { background: #1e1e1e; color: #eee; border-color: #888; }
  .hint, ul.board .claimed .status, ul.board .unavailable .status { color: #bbb; }
  .alert { background: #3a1117; color: #ffb3bd; }
  .field-error { color: #ffb3bd; }
  .notice { background: #10243f; }
  .warning { background: #3a2a05; color: #ffd98a; }
  code { background: #2a2a2a; }
  button.secondary, button.copy { background: transparent; color: #8ab4f8; border-color: #8ab4f8; }
  ul.board .free .status { color: #7ddc9b; }
  ul.board .building .status { color: #f1c75b; }
  ul.board .failed .status { color: #ffb3bd; }
  ul.checks li { background: #1e1e1e; border-color: #888; }
  ul.checks .passed .check-state, ul.checks .passed .check-status { color: #7ddc9b; }
  ul.checks .failed .check-state, ul.checks .failed .check-status { color: #ffb3bd; }
  .check-when { color: #bbb; }
  pre { background: #2a2a2a; }
}
`;
