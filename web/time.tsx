// The pragmas make the JSX runtime explicit: tsx (the CLI's loader) reads tsconfig.json from the current
// folder, and `labfleet dev` may run from any folder.
/** @jsxRuntime automatic */
/** @jsxImportSource hono/jsx */
import { useDeps } from "../shared/runtime/deps.ts";
import { formatRelative } from "../shared/runtime/time-format.ts";
import { timeFormatJs } from "./time-format-js.ts";

/**
 * Times on the console's and the portal's pages, in the viewer's time zone. The server renders each as
 * `<time datetime="ISO" data-time="how">` with a text that reads without a script (the date and time in UTC,
 * said so: the server cannot know where the page is read); the pages' script (`timesJs`) rewrites it in the
 * browser's time zone with shared/runtime/time-format.ts, the CLI's own formatter, and again as time passes.
 */

/**
 * How a time reads: `clock` "12:43" (a date when not today), `exact` "12:43:07" (activity entries), `when`
 * "12:43 (in 5 h 58 min)" (deadlines and expiries, as the CLI shows them), `relative` "3 min ago".
 */
export type TimeShow = "clock" | "exact" | "when" | "relative";

/**
 * The text a page shows before (or without) its script: the date and clock time in UTC, said so
 * ("2026-05-01 10:22 UTC"; with seconds for `exact`), or for `relative` how long ago as of `now`.
 */
export function serverTimeText(iso: string, show: TimeShow, now: Date): string {
  if (show === "relative") return formatRelative(iso, now);
  if (!Number.isFinite(Date.parse(iso))) return "";
  const at = new Date(iso).toISOString();
  return `${at.replace("T", " ").slice(0, show === "exact" ? 19 : 16)} UTC`;
}

/** A time as `<time>`; nothing for no time. `now` is the runtime's clock when absent. */
export function Time(props: { at: string | null | undefined; show?: TimeShow; now?: Date | undefined }) {
  if (!props.at) return null;
  const show = props.show ?? "clock";
  // Only a relative time depends on now: a page rendered without a configured runtime still shows clocks.
  const now = show === "relative" ? (props.now ?? useDeps().clock.now()) : (props.now ?? new Date());
  const text = serverTimeText(props.at, show, now);
  if (!text) return <>{props.at}</>;
  return (
    <time datetime={props.at} data-time={show}>
      {text}
    </time>
  );
}

/**
 * The browser's half: time-format.ts compiled for the browser (web/time-format-js.ts), then the code that
 * rewrites every `time[data-time]` in the viewer's zone, at once and every 5 s, with the full local date and
 * zone as its tooltip. `labfleetTimes.refresh(element)` does it again for a part of the page (the console
 * calls it after each live update). A time whose text would not change is not touched, so screen readers in a
 * live region hear nothing new.
 */
export const timesJs = `${timeFormatJs}
(() => {
  const T = labfleetTime;
  const text = (at, how, now) => {
    if (how === "relative") return T.formatRelative(at, now);
    if (how === "when") return T.formatWhen(at, now);
    return T.formatClock(at, now, { seconds: how === "exact" });
  };
  const full = (at) => {
    try {
      return new Date(at).toLocaleString(undefined, { dateStyle: "full", timeStyle: "long" });
    } catch {
      return "";
    }
  };
  const refresh = (root) => {
    const now = Date.now();
    for (const el of (root || document).querySelectorAll("time[data-time]")) {
      const at = el.getAttribute("datetime");
      const shown = text(at, el.getAttribute("data-time"), now);
      if (!shown) continue;
      if (el.textContent !== shown) el.textContent = shown;
      if (!el.hasAttribute("title")) el.setAttribute("title", full(at));
      el.setAttribute("data-local", "");
    }
  };
  refresh(document);
  setInterval(() => refresh(document), 5000);
  window.labfleetTimes = { refresh };
})();
`;
