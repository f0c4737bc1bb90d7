import { describe, expect, it } from "vitest";
import { accessView } from "../../shared/portal/access-view.ts";
import type { LabPage } from "../../shared/portal/claims.ts";
import { LabView } from "../../web/portal/views.tsx";

describe("a lab's access details as the pages show them", () => {
  it("reads the intended shape: names with URLs and values, notes as text", () => {
    expect(
      accessView({
        urls: { ui: "https://student-01.example.test/" },
        credentials: { user: "student", password: "s3cret", pin: 1234 },
        notes: "Sign in with this user.",
      }),
    ).toEqual({
      urls: [{ label: "ui", value: "https://student-01.example.test/" }],
      credentials: [
        { label: "user", value: "student" },
        { label: "password", value: "s3cret" },
        { label: "pin", value: "1234" },
      ],
      notes: ["Sign in with this user."],
      other: [],
    });
  });

  it("reads lists of URLs and of labelled objects, notes as lines, and keys of the lab's own", () => {
    expect(
      accessView({
        urls: [
          "https://a.example.test/",
          { label: "Grafana", url: "https://g.example.test/" },
          { href: "https://h.example.test/" },
        ],
        credentials: [
          { name: "password", value: "pw-1" },
          { user: "alice", password: "pw-2" },
        ],
        notes: ["first", "second"],
        vpn: { server: "vpn.example.test", port: 1194 },
        user: "alice",
      }),
    ).toEqual({
      urls: [
        { label: "1", value: "https://a.example.test/" },
        { label: "Grafana", value: "https://g.example.test/" },
        { label: "3", value: "https://h.example.test/" },
      ],
      credentials: [
        { label: "password", value: "pw-1" },
        { label: "2", value: '{"user":"alice","password":"pw-2"}' },
      ],
      notes: ["first", "second"],
      other: [
        { label: "vpn", value: '{"server":"vpn.example.test","port":1194}' },
        { label: "user", value: "alice" },
      ],
    });
  });

  it("shows a document that is not an object as it is", () => {
    expect(accessView("ssh lab@10.0.0.5")).toEqual({
      urls: [],
      credentials: [],
      notes: ["ssh lab@10.0.0.5"],
      other: [],
    });
    expect(accessView([1, 2]).other).toEqual([{ label: "details", value: "[1,2]" }]);
    expect(accessView({ urls: {} })).toEqual({ urls: [], credentials: [], notes: [], other: [] });
  });

  it("the student's lab page links the URLs and shows every value, never [object Object]", () => {
    const page: LabPage = {
      workshop: "conf",
      lab: "student-01",
      name: "Ada",
      access: accessView({
        urls: [{ label: "Lab", url: "https://student-01.example.test/" }, "javascript:alert(1)"],
        credentials: [{ label: "password", value: "pw-1" }],
        notes: ["Line one", "Line two"],
        user: "alice",
      }),
      sshCommand: null,
      hostKeys: [],
      guideUrl: null,
      expiry: null,
      failing: false,
      autoSwap: false,
      update: null,
      build: "ready",
      phase: null,
      unreachable: false,
      lastSeenAt: null,
    };
    const html = String(LabView({ page, now: new Date("2026-12-07T12:00:00Z") }));
    expect(html).not.toContain("[object Object]");
    expect(html).toContain('<a href="https://student-01.example.test/"');
    expect(html).toContain("<dt>Lab</dt>");
    // Only web URLs become links.
    expect(html).not.toContain('href="javascript:');
    expect(html).toContain("<code>javascript:alert(1)</code>");
    expect(html).toContain('<code data-copy="password">pw-1</code>');
    expect(html).toContain("<h2>Details</h2>");
    expect(html).toContain("<dt>user</dt>");
    expect(html).toContain("<p>Line one</p><p>Line two</p>");
  });
});
