import { describe, expect, it } from "vitest";
import { cutToWidth, LINES_PER_LAB_MAX, ProgressView } from "../../cli/progress.ts";
import type { Output } from "../../cli/render.ts";
import type { HostView } from "../../shared/fleet/workshops.ts";

function host(id: string, state: HostView["state"], extra: Partial<HostView> = {}): HostView {
  return { id, state, phase: null, phases: [], error: null, hasAccess: false, ...extra };
}

/** 500 labs: 400 ready, 10 building (student-401 building longest), 87 not started, 3 failed. */
function fleet(): HostView[] {
  return Array.from({ length: 500 }, (_, i) => {
    const n = i + 1;
    const id = `student-${String(n).padStart(2, "0")}`;
    if (n <= 400) return host(id, "ready");
    if (n <= 410) return host(id, "deploying", { phase: "install", elapsedSeconds: 1000 - n });
    if (n <= 497) return host(id, "pending");
    return host(id, "failed", { error: `setup exited with code 7: ${"x".repeat(300)}` });
  });
}

function terminal(rows: number, columns = 100, color = false) {
  const out: Output & { text: string } = {
    isTTY: true,
    color,
    rows,
    columns,
    text: "",
    write: (t) => (out.text += t),
  };
  return out;
}

// biome-ignore lint/suspicious/noControlCharactersInRegex: the redraw's cursor sequences
const CURSOR = /\u001b\[\d*[AJ]|\u001b\[2K/g;
// biome-ignore lint/suspicious/noControlCharactersInRegex: colour codes
const COLOUR = /\u001b\[\d+m/g;

/** The lines of one redraw, without its cursor movements. */
function frame(text: string): string[] {
  return text.replace(CURSOR, "").split("\n").filter(Boolean);
}

describe("progress of a run", () => {
  it("draws one line per lab while the fleet fits the terminal", () => {
    const out = terminal(24);
    new ProgressView(out).update([
      host("student-01", "ready"),
      host("student-02", "deploying", { phase: "sync" }),
    ]);
    expect(frame(out.text)).toEqual([
      expect.stringMatching(/^student-01 +ready +ready/),
      expect.stringMatching(/^student-02 +deploying +sync/),
    ]);
  });

  it("cuts a line to the terminal's width, so that the redraw starts where the last one did", () => {
    const out = terminal(24, 40, true);
    const failed = host("student-01", "failed", { error: `setup exited with code 7: ${"x".repeat(80)}` });
    new ProgressView(out).update([failed]);
    const [line] = frame(out.text);
    expect(line).toBe(`student-01  \u001b[31mfailed    \u001b[0m  -${" ".repeat(13)}…`);
    expect(line?.replace(COLOUR, "")).toHaveLength(39);
    // A colour the cut would leave open is closed.
    expect(cutToWidth("ab\u001b[32mcdefgh\u001b[0m", 5)).toBe("ab\u001b[32mcd…\u001b[0m");
    expect(cutToWidth("ab\u001b[32mcd\u001b[0m", 4)).toBe("ab\u001b[32mcd\u001b[0m");
  });

  it("fits a large fleet in the terminal: its counts, then failed labs, those building longest, and how many more", () => {
    const out = terminal(12, 100);
    const view = new ProgressView(out);
    view.update(fleet());
    const lines = frame(out.text);
    expect(lines.length).toBeLessThanOrEqual(11); // the last row stays free
    expect(lines[0]).toBe("500 labs: 400 ready · 10 deploying · 87 pending · 3 failed");
    expect(lines.slice(1, 4).map((l) => l.split(" ")[0])).toEqual([
      "student-498",
      "student-499",
      "student-500",
    ]);
    expect(lines[4]).toMatch(/^student-401 +deploying +install/);
    expect(lines[5]).toMatch(/^student-402 /);
    // 100 not ready, 9 of them shown
    expect(lines.at(-1)).toBe("… and 91 more not ready (labfleet status lists every lab)");
    // No line wraps (the redraw would start too low): a long error is cut to the width.
    for (const l of lines) expect(l.length).toBeLessThan(100);
    expect(lines[1]).toContain("setup exited with code 7");
    expect(lines[1]).toMatch(/…$/);

    // The next redraw starts where the last one did; a shorter one erases what was below it.
    out.text = "";
    view.update(fleet().map((h) => (h.state === "failed" ? h : host(h.id, "ready"))));
    expect(out.text.startsWith(`\u001b[${lines.length}A`)).toBe(true);
    expect(out.text).toContain("\u001b[J");
    expect(frame(out.text)[0]).toBe("500 labs: 497 ready · 3 failed");
    expect(frame(out.text)).toHaveLength(4);
  });

  it("without a terminal, follows a large fleet by its counts, at most every 5 s, and each failure at once", () => {
    let now = 0;
    const out: Output & { text: string } = {
      isTTY: false,
      color: false,
      text: "",
      write: (t) => (out.text += t),
    };
    const view = new ProgressView(out, () => now);
    const labs = fleet();
    view.update(labs);
    const first = out.text.split("\n").filter(Boolean);
    // Each failed lab, then the counts.
    expect(first).toHaveLength(4);
    expect(first.slice(0, 3).every((l) => /^student-\d+ +failed +- +setup exited with code 7/.test(l))).toBe(
      true,
    );
    expect(first[3]).toBe("500 labs: 400 ready · 10 deploying · 87 pending · 3 failed");

    // Counts that change within 5 s wait; a new failure does not.
    out.text = "";
    now = 1000;
    labs[401] = host(labs[401]?.id ?? "", "failed", { error: "no disk" });
    view.update(labs);
    expect(out.text).toMatch(/^student-402 +failed +- +no disk\n$/);
    out.text = "";
    now = 4999;
    labs[402] = host(labs[402]?.id ?? "", "ready");
    view.update(labs);
    expect(out.text).toBe("");
    now = 5000;
    view.update(labs);
    expect(out.text).toBe("500 labs: 401 ready · 8 deploying · 87 pending · 4 failed\n");

    // Unchanged counts print nothing; the last counts seen are printed when the run ends.
    out.text = "";
    view.update(labs);
    labs[403] = host(labs[403]?.id ?? "", "ready");
    now = 6000;
    view.update(labs);
    expect(out.text).toBe("");
    view.release();
    expect(out.text).toBe("500 labs: 402 ready · 7 deploying · 87 pending · 4 failed\n");
  });

  it(`without a terminal, prints a line per lab and change up to ${LINES_PER_LAB_MAX} labs`, () => {
    const out: Output & { text: string } = {
      isTTY: false,
      color: false,
      text: "",
      write: (t) => (out.text += t),
    };
    const view = new ProgressView(out);
    const labs = Array.from({ length: LINES_PER_LAB_MAX }, (_, i) => host(`lab-${i + 1}`, "pending"));
    view.update(labs);
    expect(out.text.split("\n").filter(Boolean)).toHaveLength(LINES_PER_LAB_MAX);
    out.text = "";
    labs[9] = host("lab-10", "deploying", { phase: "sync" });
    view.update(labs);
    expect(out.text).toMatch(/^lab-10 +deploying +sync\n$/);
  });

  it("counts the labs a run has not created yet as pending, in a fleet of its whole size", () => {
    const out: Output & { text: string } = {
      isTTY: false,
      color: false,
      text: "",
      write: (t) => (out.text += t),
    };
    // 20 of 500 labs recorded so far: counts, not a line for each of the 20.
    const created = Array.from({ length: 20 }, (_, i) =>
      host(`student-${String(i + 1).padStart(2, "0")}`, i < 5 ? "deploying" : "pending"),
    );
    new ProgressView(out).update(created, 480);
    expect(out.text).toBe("500 labs: 5 deploying · 495 pending\n");

    // On a terminal too small for 500: the counts, the labs under way, and the rest (uncreated ones among them).
    const tty = terminal(10);
    new ProgressView(tty).update(created, 480);
    const lines = frame(tty.text);
    expect(lines[0]).toBe("500 labs: 5 deploying · 495 pending");
    expect(lines).toHaveLength(9);
    expect(lines.slice(1, 6).every((l) => / deploying /.test(l))).toBe(true);
    expect(lines[8]).toBe("… and 493 more not ready (labfleet status lists every lab)");
  });
});
