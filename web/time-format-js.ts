// Generated from shared/runtime/time-format.ts by `npm run time-script`: do not edit.
/** The sha256 of the time-format.ts this was compiled from. */
export const TIME_FORMAT_SOURCE_SHA256 = "068ecdaa61da818490b6f1e8228251622f17177b8d6950287873b0ca9eb40c3c";

/** time-format.ts as a browser script: it defines `labfleetTime` (formatClock, formatRelative, ...). */
export const timeFormatJs = `"use strict";
var labfleetTime = (() => {
  var __defProp = Object.defineProperty;
  var __getOwnPropDesc = Object.getOwnPropertyDescriptor;
  var __getOwnPropNames = Object.getOwnPropertyNames;
  var __hasOwnProp = Object.prototype.hasOwnProperty;
  var __export = (target, all) => {
    for (var name in all)
      __defProp(target, name, { get: all[name], enumerable: true });
  };
  var __copyProps = (to, from, except, desc) => {
    if (from && typeof from === "object" || typeof from === "function") {
      for (let key of __getOwnPropNames(from))
        if (!__hasOwnProp.call(to, key) && key !== except)
          __defProp(to, key, { get: () => from[key], enumerable: !(desc = __getOwnPropDesc(from, key)) || desc.enumerable });
    }
    return to;
  };
  var __toCommonJS = (mod) => __copyProps(__defProp({}, "__esModule", { value: true }), mod);

  // shared/runtime/time-format.ts
  var time_format_exports = {};
  __export(time_format_exports, {
    formatClock: () => formatClock,
    formatDuration: () => formatDuration,
    formatRelative: () => formatRelative,
    formatTimeLeft: () => formatTimeLeft,
    formatWhen: () => formatWhen
  });
  function toMs(t) {
    return t instanceof Date ? t.getTime() : typeof t === "number" ? t : Date.parse(t);
  }
  var pad = (n) => String(n).padStart(2, "0");
  function formatDuration(seconds) {
    if (seconds === void 0 || !Number.isFinite(seconds) || seconds < 0) return "";
    const s = Math.round(seconds);
    if (s < 60) return \`\${s} s\`;
    const minutes = Math.floor(s / 60);
    if (minutes < 60) return \`\${minutes} min \${pad(s % 60)} s\`;
    const hours = Math.floor(minutes / 60);
    if (hours < 24) return \`\${hours} h \${pad(minutes % 60)} min\`;
    return \`\${Math.floor(hours / 24)} d \${pad(hours % 24)} h\`;
  }
  function span(ms) {
    const s = Math.floor(ms / 1e3);
    if (s < 60) return \`\${s} s\`;
    const minutes = Math.floor(s / 60);
    if (minutes < 60) return \`\${minutes} min\`;
    const hours = Math.floor(minutes / 60);
    if (hours < 24) return \`\${hours} h \${pad(minutes % 60)} min\`;
    return \`\${Math.floor(hours / 24)} d \${hours % 24} h\`;
  }
  function formatRelative(t, now = Date.now()) {
    const ms = toMs(t) - toMs(now);
    if (!Number.isFinite(ms)) return "";
    if (Math.abs(ms) < 1e3) return "now";
    return ms > 0 ? \`in \${span(ms)}\` : \`\${span(-ms)} ago\`;
  }
  function formatTimeLeft(t, now = Date.now()) {
    const ms = toMs(t) - toMs(now);
    if (!Number.isFinite(ms)) return "";
    return ms <= 0 ? "over" : span(ms);
  }
  function parts(ms, timeZone) {
    const f = new Intl.DateTimeFormat("en-CA", {
      ...timeZone ? { timeZone } : {},
      year: "numeric",
      month: "2-digit",
      day: "2-digit",
      hour: "2-digit",
      minute: "2-digit",
      second: "2-digit",
      hourCycle: "h23"
    });
    return Object.fromEntries(f.formatToParts(new Date(ms)).map((p) => [p.type, p.value]));
  }
  function formatClock(t, now = Date.now(), opts = {}) {
    const ms = toMs(t);
    if (!Number.isFinite(ms)) return "";
    const p = parts(ms, opts.timeZone);
    const today = parts(toMs(now), opts.timeZone);
    const clock = \`\${p.hour}:\${p.minute}\${opts.seconds ? \`:\${p.second}\` : ""}\`;
    const sameDay = p.year === today.year && p.month === today.month && p.day === today.day;
    return sameDay ? clock : \`\${p.year}-\${p.month}-\${p.day} \${clock}\`;
  }
  function formatWhen(t, now = Date.now(), opts = {}) {
    const clock = formatClock(t, now, opts);
    return clock ? \`\${clock} (\${formatRelative(t, now)})\` : "";
  }
  return __toCommonJS(time_format_exports);
})();
`;
