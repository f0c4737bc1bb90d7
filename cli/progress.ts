import type { HostView } from "../shared/fleet/workshops.ts";
import { clean, duration, type Output, paint, phaseText } from "./render.ts";

/**
 * Without a terminal, a fleet of more labs than this is followed by its counts, not one line per lab and change
 * (a 500-lab `up` would print thousands of lines).
 */
export const LINES_PER_LAB_MAX = 50;
/** Without a terminal, at most one counts line this often (and always the last one, and each failure at once). */
const COUNTS_EVERY_MS = 5_000;
/** A terminal that does not say how large it is. */
const DEFAULT_ROWS = 24;
const DEFAULT_COLUMNS = 80;

/** The order states are counted in: what is done first, then what is under way, then what failed. */
const STATE_ORDER = ["ready", "deploying", "provisioning", "pending", "failed", "torn_down"];

export function hostLine(out: Output, h: HostView, idWidth: number, elapsed = true): string {
  const phase = phaseText(h);
  const err = h.state === "failed" && h.error ? `  ${clean(h.error.split("\n")[0])}` : "";
  return `${clean(h.id).padEnd(idWidth)}  ${paint(out, h.state, h.state.padEnd(10))}  ${phase.padEnd(34)}  ${elapsed ? duration(h.elapsedSeconds).padStart(10) : ""}${err}`.trimEnd();
}

/**
 * "500 labs: 312 ready · 180 deploying · 3 failed": every state a lab is in, in STATE_ORDER. `uncreated` labs
 * the run will create but has no record of yet count as pending.
 */
export function countsLine(out: Output, hosts: HostView[], uncreated = 0): string {
  const counts = new Map<string, number>();
  for (const h of hosts) counts.set(h.state, (counts.get(h.state) ?? 0) + 1);
  if (uncreated > 0) counts.set("pending", (counts.get("pending") ?? 0) + uncreated);
  const states = [...counts.keys()].sort(
    (a, b) => (STATE_ORDER.indexOf(a) + 1 || 99) - (STATE_ORDER.indexOf(b) + 1 || 99),
  );
  return `${hosts.length + uncreated} labs: ${states.map((s) => `${counts.get(s)} ${paint(out, s, s.replace("_", " "))}`).join(" · ")}`;
}

/**
 * Per-lab progress while a run goes on. On a terminal it is redrawn in place, one line per lab while the fleet
 * fits the terminal; a larger fleet gets its counts, then the labs worth a look (failed ones, then those building
 * longest, then those not started), as many as fit, and how many more there are. Without a terminal a line is
 * printed when a lab's state or phase changes; past LINES_PER_LAB_MAX labs, a counts line when the counts change
 * (at most every 5 s, and the last one always) and a line for each lab that fails, when it does. While a run
 * creates the fleet, the labs it has not created yet count in its size and as pending, so the view neither
 * starts one line per lab nor counts a fleet smaller than it will be.
 */
export class ProgressView {
  private drawn = 0;
  private last = new Map<string, string>();
  private counts = { text: "", printedAt: Number.NEGATIVE_INFINITY, pending: false };

  constructor(
    private readonly out: Output,
    private readonly now: () => number = Date.now,
  ) {}

  /** `uncreated`: how many labs the run will create that have no record yet. */
  update(hosts: HostView[], uncreated = 0): void {
    if (this.out.isTTY) this.draw(hosts, uncreated);
    else if (hosts.length + uncreated > LINES_PER_LAB_MAX) this.printCounts(hosts, uncreated);
    else this.printChanges(hosts);
  }

  /** Ends in-place drawing so what follows prints below; prints the counts a large fleet was last seen with. */
  release(): void {
    if (this.counts.pending) this.writeCounts();
    this.drawn = 0;
  }

  private draw(hosts: HostView[], uncreated: number): void {
    const rows = Math.max(8, this.out.rows ?? DEFAULT_ROWS);
    // The last row stays free: a line written there scrolls the screen, and the redraw would start too low.
    const lines =
      hosts.length + uncreated < rows ? this.allLines(hosts) : this.condensed(hosts, uncreated, rows - 1);
    // A line wider than the terminal would wrap onto a second row, and the redraw would start too low: each is
    // cut to the width (a failed lab's whole error is in `labfleet status`).
    const width = Math.max(20, this.out.columns ?? DEFAULT_COLUMNS) - 1;
    for (let i = 0; i < lines.length; i++) lines[i] = cutToWidth(lines[i] ?? "", width);
    const up = this.drawn > 0 ? `\u001b[${this.drawn}A` : "";
    // Fewer lines than last time: what was below them is erased (\u001b[J).
    const rest = lines.length < this.drawn ? "\u001b[J" : "";
    this.out.write(`${up}${lines.map((l) => `\u001b[2K${l}\n`).join("")}${rest}`);
    this.drawn = lines.length;
  }

  private allLines(hosts: HostView[]): string[] {
    const width = idWidth(hosts);
    return hosts.map((h) => hostLine(this.out, h, width));
  }

  /** The counts, then the labs worth a look, in `room` lines in all. */
  private condensed(hosts: HostView[], uncreated: number, room: number): string[] {
    const rank = (h: HostView) => (h.state === "failed" ? 0 : h.state === "deploying" ? 1 : 2);
    const shown = hosts
      .filter((h) => h.state !== "ready" && h.state !== "torn_down")
      .sort((a, b) => rank(a) - rank(b) || (b.elapsedSeconds ?? 0) - (a.elapsedSeconds ?? 0));
    // One line for the counts, one for "and N more" when some are left out.
    const fit = shown.length <= room - 1 ? shown : shown.slice(0, room - 2);
    const width = idWidth(fit);
    const lines = [countsLine(this.out, hosts, uncreated), ...fit.map((h) => hostLine(this.out, h, width))];
    const more = shown.length - fit.length + uncreated;
    if (more > 0) lines.push(`… and ${more} more not ready (labfleet status lists every lab)`);
    return lines;
  }

  private printChanges(hosts: HostView[]): void {
    const width = idWidth(hosts);
    for (const h of hosts) {
      // A line is printed when the state or phase changes, not for elapsed time.
      const key = `${h.state}|${h.phase}|${h.error ?? ""}`;
      if (this.last.get(h.id) === key) continue;
      this.last.set(h.id, key);
      this.out.write(`${hostLine(this.out, h, width, false)}\n`);
    }
  }

  private printCounts(hosts: HostView[], uncreated: number): void {
    // Each failure at once, with its reason.
    for (const h of hosts) {
      const key = h.state === "failed" ? `failed|${h.error ?? ""}` : "";
      if ((this.last.get(h.id) ?? "") === key) continue;
      this.last.set(h.id, key);
      if (key) this.out.write(`${hostLine(this.out, h, idWidth([h]), false)}\n`);
    }
    const text = countsLine(this.out, hosts, uncreated);
    if (text !== this.counts.text) {
      this.counts.text = text;
      this.counts.pending = true;
    }
    if (this.counts.pending && this.now() - this.counts.printedAt >= COUNTS_EVERY_MS) this.writeCounts();
  }

  private writeCounts(): void {
    this.out.write(`${this.counts.text}\n`);
    this.counts.printedAt = this.now();
    this.counts.pending = false;
  }
}

// biome-ignore lint/suspicious/noControlCharactersInRegex: the colour codes paint() writes
const COLOUR = /\u001b\[[0-9;]*m/g;

/** A line cut to `width` characters on screen ("…" last), its colour codes kept whole and taking no width. */
export function cutToWidth(line: string, width: number): string {
  if (line.replace(COLOUR, "").length <= width) return line;
  let shown = 0;
  let i = 0;
  let open = false;
  while (i < line.length && shown < width - 1) {
    COLOUR.lastIndex = i;
    const code = COLOUR.exec(line);
    if (code?.index === i) {
      open = code[0] !== "\u001b[0m";
      i += code[0].length;
      continue;
    }
    shown++;
    i++;
  }
  return `${line.slice(0, i)}…${open ? "\u001b[0m" : ""}`;
}

function idWidth(hosts: HostView[]): number {
  return Math.max(4, ...hosts.map((h) => clean(h.id).length));
}
